//! In-flight leases per connection (docs/contract.md §10): how many requests the scheduler has
//! sent to a connection and not yet seen finish.
//!
//! One slot per connection holds a count and an expiry. Every increment refreshes the
//! expiry to `now + lease`, so a connection whose releases were lost (a crashed stream, a
//! forgotten callback) drops back to 0 once the lease runs out — a lease, not a
//! reference count. A slot is expired when `now >= expires_at`.

use rustc_hash::FxHashMap;
use std::hash::Hash;

/// The lease of a selection: two minutes.
pub const DEFAULT_LEASE_MS: i64 = 120_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
  count: u32,
  expires_at: i64,
}

impl Slot {
  fn expired(&self, now_ms: i64) -> bool {
    now_ms >= self.expires_at
  }
}

/// The in-flight counts of every connection.
#[derive(Debug, Clone)]
pub struct Inflight<K> {
  slots: FxHashMap<K, Slot>,
  /// Never later than the earliest expiry of any slot (`i64::MAX` when there is none), so
  /// the prune on every increment skips the scan while nothing can have expired.
  earliest_expiry: i64,
}

impl<K> Default for Inflight<K> {
  fn default() -> Self {
    Inflight {
      slots: FxHashMap::default(),
      earliest_expiry: i64::MAX,
    }
  }
}

impl<K: Eq + Hash + Clone> Inflight<K> {
  /// Counts one more request on `key` and returns the new count. An expired slot counts
  /// as 0; the slot's expiry becomes `now_ms + lease_ms`; every expired slot is pruned.
  pub fn increment(&mut self, key: &K, lease_ms: i64, now_ms: i64) -> u32 {
    self.prune(now_ms);
    let expires_at = now_ms.saturating_add(lease_ms);
    let slot = self.slots.entry(key.clone()).or_insert(Slot {
      count: 0,
      expires_at,
    });
    slot.count = slot.count.saturating_add(1);
    slot.expires_at = expires_at;
    self.earliest_expiry = self.earliest_expiry.min(expires_at);
    slot.count
  }

  /// Releases one request on `key`: floors at 0, and removes the slot when it reaches 0 or
  /// has expired. Unknown keys are left alone.
  pub fn decrement(&mut self, key: &K, now_ms: i64) {
    if let Some(slot) = self.slots.get_mut(key) {
      if slot.expired(now_ms) || slot.count <= 1 {
        self.slots.remove(key);
      } else {
        slot.count -= 1;
      }
    }
  }

  /// The count on `key`: 0 when unknown or expired. Reading never changes the state.
  pub fn get(&self, key: &K, now_ms: i64) -> u32 {
    match self.slots.get(key) {
      Some(slot) if !slot.expired(now_ms) => slot.count,
      _ => 0,
    }
  }

  /// Removes every expired slot.
  pub fn prune(&mut self, now_ms: i64) {
    if now_ms < self.earliest_expiry {
      return;
    }
    self.slots.retain(|_, slot| !slot.expired(now_ms));
    self.earliest_expiry = self
      .slots
      .values()
      .map(|slot| slot.expires_at)
      .min()
      .unwrap_or(i64::MAX);
  }

  /// Keeps only the slots whose key satisfies `keep` (the bound on names drops the rest).
  pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
    self.slots.retain(|key, _| keep(key));
  }

  /// How many slots are stored (expired ones included until pruned).
  pub fn len(&self) -> usize {
    self.slots.len()
  }

  pub fn is_empty(&self) -> bool {
    self.slots.is_empty()
  }

  pub fn clear(&mut self) {
    self.slots.clear();
    self.earliest_expiry = i64::MAX;
  }
}

// Counting, expiry, refresh and release have their cases in __test__/inflight.test.mjs;
// this one is about the `earliest_expiry` shortcut, which JavaScript cannot see.
#[cfg(test)]
#[test]
fn increment_prunes_every_expired_slot_after_any_refresh() {
  const T0: i64 = 1_000_000;
  let mut inflight = Inflight::default();
  inflight.increment(&"a", 1000, T0);
  inflight.increment(&"b", 5000, T0);
  inflight.increment(&"c", 1000, T0);
  inflight.increment(&"d", 1000, T0 + 1000);
  assert_eq!(inflight.len(), 2, "a and c pruned, b and d kept");
  // A later refresh of a slot does not hide an earlier expiry of another.
  inflight.increment(&"b", 100_000, T0 + 1001);
  inflight.increment(&"e", 1000, T0 + 2000);
  assert_eq!(inflight.len(), 2, "d pruned, b and e kept");
}
