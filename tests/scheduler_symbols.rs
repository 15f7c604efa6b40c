//! The scheduler's bounded name table: a symbol never comes back for another name, however
//! many names pass through one slot.

use omniroute_quota_engine::engine::scheduler::Symbols;

#[test]
fn a_symbol_never_comes_back_for_another_name_after_its_slot_s_generations_run_out() {
  let mut symbols = Symbols::default();
  let mut evicted = Vec::new();
  let victim = symbols.intern("victim", 1, &mut evicted);
  // With room for one name, each new one evicts the last and takes its slot, one
  // generation later: 2²¹ generations later the slot's generation count is spent.
  for i in 0..(1u32 << 21) + 2 {
    let sym = symbols.intern(&format!("name-{i}"), 1, &mut evicted);
    assert_ne!(sym, victim, "name-{i} got the victim's symbol");
    assert!(sym < 1 << 53, "exact in an f64");
  }
  assert!(evicted.contains(&victim));
}
