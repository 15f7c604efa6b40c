//! The combo scheduler's process-wide state (docs/contract.md §10): in-flight leases,
//! account buckets and DRR deficits, plus the symbol table that names them.
//!
//! Every name the scheduler keys on — connection ids, execution keys, combo names — is
//! interned once to a `u32` symbol, so a selection passes numbers in a typed array instead
//! of strings. Symbols are process-wide and never reused, so the JavaScript caches of
//! several isolates (worker threads) agree with each other. The table grows with the
//! number of distinct names seen — the host's connections, combos and their targets, a
//! bounded set. Request-supplied strings (the model) are never interned.

use crate::core::scheduler::select::{Scheduler, Target};
use rustc_hash::FxHashMap;

/// An interned name.
pub type Sym = u32;

/// Per target, the selection buffer holds this many numbers: the execution key's symbol,
/// the connection's symbol (or [`NO_CONNECTION`]), the weight (`NaN` when not a number)
/// and the connection's concurrency cap (`NaN` for none); then one index per target for
/// the order written back.
pub const SELECT_STRIDE: usize = 4;

/// The stand-in for "no connection" in the selection buffer.
pub const NO_CONNECTION: f64 = -1.0;

/// Names to symbols; symbols are dense, in order of first sight.
#[derive(Default)]
pub struct Symbols {
  ids: FxHashMap<Box<str>, Sym>,
}

impl Symbols {
  /// The symbol of `name`, interning it on first sight.
  pub fn intern(&mut self, name: &str) -> Sym {
    if let Some(&id) = self.ids.get(name) {
      return id;
    }
    let id = self.ids.len() as Sym;
    self.ids.insert(name.into(), id);
    id
  }

  /// The symbol of `name` if it was ever interned: a name never seen has no state.
  pub fn get(&self, name: &str) -> Option<Sym> {
    self.ids.get(name).copied()
  }
}

/// Everything the scheduler keeps between calls.
#[derive(Default)]
pub struct SchedulerState {
  pub symbols: Symbols,
  pub scheduler: Scheduler<Sym>,
  /// Scratch of a selection, reused between calls.
  pub targets: Vec<Target<Sym>>,
  pub order: Vec<usize>,
}

impl SchedulerState {
  /// One selection over `buffer` (laid out as [`SELECT_STRIDE`] says) for `count`
  /// targets; the order is written back as indices after the targets.
  pub fn select_into(
    &mut self,
    combo: Sym,
    model_str: Option<&str>,
    now_ms: i64,
    count: usize,
    buffer: &mut [f64],
  ) {
    self.targets.clear();
    self.targets.extend(
      buffer[..count * SELECT_STRIDE]
        .chunks_exact(SELECT_STRIDE)
        .map(|t| Target {
          execution_key: t[0] as Sym,
          connection: (t[1] != NO_CONNECTION).then_some(t[1] as Sym),
          weight: t[2],
          max_concurrent: t[3],
        }),
    );
    self
      .scheduler
      .select(&self.targets, &combo, model_str, now_ms, &mut self.order);
    let out = &mut buffer[count * SELECT_STRIDE..count * (SELECT_STRIDE + 1)];
    for (slot, &index) in out.iter_mut().zip(&self.order) {
      *slot = index as f64;
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn symbols_are_dense_and_stable() {
    let mut symbols = Symbols::default();
    assert_eq!(symbols.intern("a"), 0);
    assert_eq!(symbols.intern("b"), 1);
    assert_eq!(symbols.intern("a"), 0);
    assert_eq!(symbols.get("c"), None);
  }

  #[test]
  fn a_selection_writes_the_order_after_the_targets() {
    let mut state = SchedulerState::default();
    let combo = state.symbols.intern("combo");
    let (a, b) = (state.symbols.intern("a"), state.symbols.intern("b"));
    let conn = state.symbols.intern("conn");
    let mut buffer = vec![
      a as f64,
      conn as f64,
      1.0,
      f64::NAN,
      b as f64,
      NO_CONNECTION,
      3.0,
      f64::NAN,
      -9.0,
      -9.0,
    ];
    state.select_into(combo, None, 1_000, 2, &mut buffer);
    let mut order = [buffer[8], buffer[9]];
    order.sort_by(f64::total_cmp);
    assert_eq!(order, [0.0, 1.0]);
  }
}
