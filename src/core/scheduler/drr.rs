//! Deficit round robin over a combo's targets (docs/contract.md §10, step 4), with its state per
//! combo: each target's deficit, keyed by its execution key.
//!
//! A round credits every target `w / Σw` (`w` = its weight when finite and > 0, else 1),
//! picks the largest deficit (ties: the first in input order), and charges that winner 1: nginx's smooth weighted round robin, scaled so one selection costs 1 (weights 2
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
}

impl<C: Eq + Hash + Clone, K: Eq + Hash + Clone> Drr<C, K> {
  /// One round over the targets `keys` (execution keys) with `weights` (parallel to
  /// `keys`): the index of the winner, the largest deficit after this round's credit
  /// (ties: the first in input order), which has paid 1.
  ///
  /// With one target nothing changes (no combo state is created); with none, `None`. A
  /// key given twice shares one deficit, credited twice.
  pub fn round(&mut self, combo: &C, keys: &[K], weights: &[f64]) -> Option<usize> {
    debug_assert_eq!(keys.len(), weights.len());
    if keys.len() < 2 {
      return (keys.len() == 1).then_some(0);
    }
    let total: f64 = weights.iter().map(|&w| effective_weight(w)).sum();
    let mut slots = std::mem::take(&mut self.slots);
    slots.clear();
    let state = self.combo_state(combo);
    state.slots_of(keys, &mut slots);
    for (&slot, &weight) in slots.iter().zip(weights) {
      state.deficits[slot] += effective_weight(weight) / total;
    }
    // Read after every credit, so a key given twice is consistent.
    let mut winner = 0;
    for (i, &slot) in slots.iter().enumerate().skip(1) {
      if state.deficits[slot] > state.deficits[slots[winner]] {
        winner = i;
      }
    }
    state.deficits[slots[winner]] -= 1.0;
    self.slots = slots;
    Some(winner)
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
    assert_eq!(drr.round(&"c", &["A"], &[5.0]), Some(0));
    assert!(!drr.has_combo(&"c"));
    assert_eq!(drr.round(&"c", &[], &[]), None);
  }

  #[test]
  fn forget_drops_combos_and_keys_and_keeps_the_rest() {
    let mut drr: Drr<&str, &str> = Drr::default();
    drr.round(&"x", &["A", "B", "C"], &[1.0, 1.0, 2.0]);
    drr.round(&"y", &["A", "B"], &[1.0, 1.0]);
    let (a, c) = (drr.deficit(&"x", &"A"), drr.deficit(&"x", &"C"));
    drr.forget(|combo| *combo == "y", |key| *key == "B");
    assert!(!drr.has_combo(&"y"));
    assert_eq!(drr.key_count(), 2);
    assert_eq!((drr.deficit(&"x", &"A"), drr.deficit(&"x", &"C")), (a, c));
    assert_eq!(drr.deficit(&"x", &"B"), 0.0);
    // The previous round's slots were remapped: a round with the same keys still works.
    drr.round(&"x", &["A", "B", "C"], &[1.0, 1.0, 2.0]);
    assert_eq!(drr.key_count(), 3);
  }
}
