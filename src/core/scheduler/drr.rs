//! Deficit round robin over a combo's targets (docs/contract.md §10, step 4), with its state per
//! combo: each target's deficit, keyed by its execution key.
//!
//! A round credits every target `w / Σw` (`w` = its weight when finite and > 0, else 1),
//! ranks the targets by deficit (largest first, ties in input order), and charges the
//! winner 1: nginx's smooth weighted round robin, scaled so one selection costs 1 (weights 2
//! and 1 give A, B, A, A, B, A, …). How far a count strays from its share `n · w / Σw` is
//! the subject of `tests/drr_props.rs`.
//!
//! At most [`MAX_COMBOS`] combos keep state; a new one evicts the oldest inserted.
//! [`Drr::forget`] drops the combos and keys the scheduler's bound on names evicts.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::hash::Hash;

/// How many combos keep DRR state at once.
pub const MAX_COMBOS: usize = 200;

/// The weight a round credits: `weight` when finite and > 0, else 1.
pub fn effective_weight(weight: f64) -> f64 {
  if weight.is_finite() && weight > 0.0 {
    weight
  } else {
    1.0
  }
}

/// A key whose ascending order is `deficit`'s descending [`f64::total_cmp`] order.
fn descending_key(deficit: f64) -> u64 {
  let bits = deficit.to_bits();
  // The total order of IEEE 754 as unsigned integers: flip all bits of negatives, the
  // sign bit of the rest; then reverse.
  let ascending = if bits >> 63 == 1 {
    !bits
  } else {
    bits | (1 << 63)
  };
  !ascending
}

/// One combo's deficits: an index per execution key into a flat vector, so a round does
/// one hash lookup per target — none when the targets are those of the previous round,
/// the usual case. Keys are removed only by [`Drr::forget`] (the bound on names).
#[derive(Debug, Clone)]
struct ComboState<K> {
  index: FxHashMap<K, usize>,
  deficits: Vec<f64>,
  /// The keys of the previous round and their slots.
  last_keys: Vec<K>,
  last_slots: Vec<usize>,
}

impl<K> Default for ComboState<K> {
  fn default() -> Self {
    ComboState {
      index: FxHashMap::default(),
      deficits: Vec::new(),
      last_keys: Vec::new(),
      last_slots: Vec::new(),
    }
  }
}

impl<K: Eq + Hash + Clone> ComboState<K> {
  /// Drops the keys that satisfy `gone` (rebuilding the slots only when one does).
  fn forget(&mut self, gone: &impl Fn(&K) -> bool) {
    if !self.index.keys().any(gone) {
      return;
    }
    let old = std::mem::take(&mut self.index);
    let deficits = std::mem::take(&mut self.deficits);
    for (key, slot) in old {
      if !gone(&key) {
        self.index.insert(key, self.deficits.len());
        self.deficits.push(deficits[slot]);
      }
    }
    self.last_keys.clear();
    self.last_slots.clear();
  }

  fn slot(&mut self, key: &K) -> usize {
    if let Some(&slot) = self.index.get(key) {
      return slot;
    }
    let slot = self.deficits.len();
    self.index.insert(key.clone(), slot);
    self.deficits.push(0.0);
    slot
  }

  /// Fills `slots` with the slot of each key, in order.
  fn slots_of(&mut self, keys: &[K], slots: &mut Vec<usize>) {
    if self.last_keys.as_slice() == keys {
      slots.extend_from_slice(&self.last_slots);
      return;
    }
    slots.extend(keys.iter().map(|key| self.slot(key)));
    self.last_keys.clear();
    self.last_keys.extend_from_slice(keys);
    self.last_slots.clear();
    self.last_slots.extend_from_slice(slots);
  }
}

/// The DRR state of every combo.
#[derive(Debug, Clone, Default)]
pub struct Drr<C, K> {
  combos: FxHashMap<C, ComboState<K>>,
  /// Combo keys in insertion order, for the eviction.
  inserted: VecDeque<C>,
  /// Scratch of a round: each target's slot in its combo's state.
  slots: Vec<usize>,
  /// Scratch of a round: (sort key, index) pairs.
  keyed: Vec<(u64, u32)>,
}

impl<C: Eq + Hash + Clone, K: Eq + Hash + Clone> Drr<C, K> {
  /// One round over the targets `keys` (execution keys) with `weights` (parallel to
  /// `keys`): fills `rank` with indices into `keys`, largest deficit after this round's
  /// credit first (ties in input order). `rank[0]` is the winner and has paid 1.
  ///
  /// With one target nothing changes (no combo state is created); with none, `rank` is
  /// empty. A key given twice shares one deficit, credited twice.
  pub fn round(&mut self, combo: &C, keys: &[K], weights: &[f64], rank: &mut Vec<usize>) {
    debug_assert_eq!(keys.len(), weights.len());
    rank.clear();
    match keys.len() {
      0 => return,
      1 => {
        rank.push(0);
        return;
      }
      _ => {}
    }
    let total: f64 = weights.iter().map(|&w| effective_weight(w)).sum();
    let mut slots = std::mem::take(&mut self.slots);
    let mut keyed = std::mem::take(&mut self.keyed);
    slots.clear();
    keyed.clear();
    let state = self.combo_state(combo);
    state.slots_of(keys, &mut slots);
    for (&slot, &weight) in slots.iter().zip(weights) {
      state.deficits[slot] += effective_weight(weight) / total;
    }
    // Rank by descending deficit with a stable sort (ties keep input order) on plain
    // integer keys: no indirection in the comparisons, which are most of a round's cost at
    // hundreds of targets. Reading the deficits after every credit keeps a key given
    // twice consistent.
    keyed.extend(
      slots
        .iter()
        .enumerate()
        .map(|(i, &slot)| (descending_key(state.deficits[slot]), i as u32)),
    );
    keyed.sort_by_key(|&(key, _)| key);
    rank.extend(keyed.iter().map(|&(_, i)| i as usize));
    state.deficits[slots[rank[0]]] -= 1.0;
    self.slots = slots;
    self.keyed = keyed;
  }

  fn combo_state(&mut self, combo: &C) -> &mut ComboState<K> {
    if !self.combos.contains_key(combo) {
      while self.combos.len() >= MAX_COMBOS {
        let Some(oldest) = self.inserted.pop_front() else {
          break;
        };
        self.combos.remove(&oldest);
      }
      self.inserted.push_back(combo.clone());
    }
    self.combos.entry(combo.clone()).or_default()
  }

  /// The deficit of `key` in `combo` (0 when there is none).
  pub fn deficit(&self, combo: &C, key: &K) -> f64 {
    self
      .combos
      .get(combo)
      .and_then(|state| state.index.get(key).map(|&slot| state.deficits[slot]))
      .unwrap_or(0.0)
  }

  /// Whether `combo` has state.
  pub fn has_combo(&self, combo: &C) -> bool {
    self.combos.contains_key(combo)
  }

  /// How many combos have state.
  pub fn combo_count(&self) -> usize {
    self.combos.len()
  }

  /// Drops the state of every combo that satisfies `combo_gone` and, in the others, of
  /// every key that satisfies `key_gone`.
  pub fn forget(&mut self, combo_gone: impl Fn(&C) -> bool, key_gone: impl Fn(&K) -> bool) {
    self.combos.retain(|combo, _| !combo_gone(combo));
    self.inserted.retain(|combo| !combo_gone(combo));
    for state in self.combos.values_mut() {
      state.forget(&key_gone);
    }
  }

  /// How many (combo, key) deficits are stored.
  pub fn key_count(&self) -> usize {
    self.combos.values().map(|state| state.index.len()).sum()
  }

  pub fn clear(&mut self) {
    self.combos.clear();
    self.inserted.clear();
  }
}

// Crediting, paying, ties, invalid weights, per-combo state and the eviction have their
// cases in __test__/scheduler.test.mjs; the shares, in tests/drr_props.rs; deficits that
// follow their keys as the targets change, in __test__/scheduler-differential.test.mjs.
#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn one_target_changes_nothing() {
    let mut drr = Drr::default();
    let mut rank = Vec::new();
    drr.round(&"c", &["A"], &[5.0], &mut rank);
    assert_eq!(rank, vec![0]);
    assert!(!drr.has_combo(&"c"));
    drr.round(&"c", &[], &[], &mut rank);
    assert!(rank.is_empty());
  }

  #[test]
  fn the_sort_key_orders_like_total_cmp_reversed() {
    let values = [
      f64::NEG_INFINITY,
      -2.5,
      -1.0,
      -0.0,
      0.0,
      1e-300,
      0.25,
      1.0,
      f64::INFINITY,
    ];
    for a in values {
      for b in values {
        assert_eq!(
          descending_key(a).cmp(&descending_key(b)),
          b.total_cmp(&a),
          "{a} vs {b}"
        );
      }
    }
  }

  #[test]
  fn forget_drops_combos_and_keys_and_keeps_the_rest() {
    let mut drr: Drr<&str, &str> = Drr::default();
    let mut rank = Vec::new();
    drr.round(&"x", &["A", "B", "C"], &[1.0, 1.0, 2.0], &mut rank);
    drr.round(&"y", &["A", "B"], &[1.0, 1.0], &mut rank);
    let (a, c) = (drr.deficit(&"x", &"A"), drr.deficit(&"x", &"C"));
    drr.forget(|combo| *combo == "y", |key| *key == "B");
    assert!(!drr.has_combo(&"y"));
    assert_eq!(drr.key_count(), 2);
    assert_eq!((drr.deficit(&"x", &"A"), drr.deficit(&"x", &"C")), (a, c));
    assert_eq!(drr.deficit(&"x", &"B"), 0.0);
    // The previous round's slots were remapped: a round with the same keys still works.
    drr.round(&"x", &["A", "B", "C"], &[1.0, 1.0, 2.0], &mut rank);
    assert_eq!(drr.key_count(), 3);
  }
}
