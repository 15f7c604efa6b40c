//! Account buckets (docs/contract.md §10): which of a connection's upstream usage windows — the
//! 5-hour session, the 7-day week, a 7-day per-model week — are used up, and until when.
//!
//! An entry exists only while its window is saturated; it carries the window's reset time
//! (or none: saturated until a later reading clears it) and is dropped lazily by the first
//! look at or after that time.

use rustc_hash::FxHashMap;
use std::hash::Hash;

/// A window is saturated at or above this used percentage.
pub const SATURATION_THRESHOLD_PCT: f64 = 100.0;

/// The 5-hour session window's key.
pub const WINDOW_5H: &str = "5h";
/// The 7-day window's key.
pub const WINDOW_7D: &str = "7d";
/// The prefix of a per-model 7-day window's key, `"7d:<model>"`.
pub const WINDOW_7D_MODEL_PREFIX: &str = "7d:";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
  window: Box<str>,
  /// `None`: saturated until cleared.
  reset_at: Option<i64>,
}

impl Entry {
  fn has_reset(&self, now_ms: i64) -> bool {
    self.reset_at.is_some_and(|reset_at| now_ms >= reset_at)
  }
}

/// Whether `window` is the gating window number `which`: 0 = `5h`, 1 = `7d`,
/// 2 = `7d:<model>`.
fn is_gating_window(window: &str, which: usize, model: Option<&str>) -> bool {
  match which {
    0 => window == WINDOW_5H,
    1 => window == WINDOW_7D,
    // An empty model names no model window (`"7d:"` is not one).
    _ => model.is_some_and(|model| {
      !model.is_empty() && window.strip_prefix(WINDOW_7D_MODEL_PREFIX) == Some(model)
    }),
  }
}

/// The saturated windows of every connection.
#[derive(Debug, Clone, Default)]
pub struct AccountBuckets<K> {
  /// Per connection, its saturated windows (a handful at most, so a short list).
  by_connection: FxHashMap<K, Vec<Entry>>,
  count: usize,
}

impl<K: Eq + Hash + Clone> AccountBuckets<K> {
  /// Records a usage reading of `window` on `connection`. A reset already past
  /// (`reset_at <= now_ms`), or a `used_pct` below [`SATURATION_THRESHOLD_PCT`] or not
  /// finite, clears the entry; otherwise the window is saturated until `reset_at`
  /// (`None`: until cleared).
  pub fn record_usage(
    &mut self,
    connection: &K,
    window: &str,
    used_pct: f64,
    reset_at: Option<i64>,
    now_ms: i64,
  ) {
    let reset_past = reset_at.is_some_and(|reset_at| reset_at <= now_ms);
    if reset_past || !used_pct.is_finite() || used_pct < SATURATION_THRESHOLD_PCT {
      self.remove(connection, |w| w == window);
      return;
    }
    let entries = self.by_connection.entry(connection.clone()).or_default();
    match entries.iter_mut().find(|entry| &*entry.window == window) {
      Some(entry) => entry.reset_at = reset_at,
      None => {
        entries.push(Entry {
          window: window.into(),
          reset_at,
        });
        self.count += 1;
      }
    }
  }

  /// Whether `window` of `connection` is saturated at `now_ms`; an entry whose reset time
  /// has come (`now_ms >= reset_at`) is removed and reads as not saturated. Missing → false.
  pub fn is_saturated(&mut self, connection: &K, window: &str, now_ms: i64) -> bool {
    self.first_saturated(connection, now_ms, 1, |w, _| w == window)
  }

  /// Whether a target on `connection` is gated for `model`: its `5h`, `7d` or `7d:<model>`
  /// window is saturated (checked in that order, each with the lazy reset of
  /// [`is_saturated`](Self::is_saturated), stopping at the first saturated one).
  pub fn is_gated(&mut self, connection: &K, model: Option<&str>, now_ms: i64) -> bool {
    self.count != 0
      && self.first_saturated(connection, now_ms, 3, |w, which| {
        is_gating_window(w, which, model)
      })
  }

  /// Whether any of the windows `0..count` (`is_window(name, which)`) of `connection` is
  /// saturated, looked at in that order and stopping at the first saturated one; an entry
  /// whose reset time has come is removed on the way. One lookup of the connection.
  fn first_saturated(
    &mut self,
    connection: &K,
    now_ms: i64,
    count: usize,
    is_window: impl Fn(&str, usize) -> bool,
  ) -> bool {
    let Some(entries) = self.by_connection.get_mut(connection) else {
      return false;
    };
    let mut saturated = false;
    for which in 0..count {
      let Some(at) = entries.iter().position(|e| is_window(&e.window, which)) else {
        continue;
      };
      if !entries[at].has_reset(now_ms) {
        saturated = true;
        break;
      }
      entries.swap_remove(at);
      self.count -= 1;
    }
    if entries.is_empty() {
      self.by_connection.remove(connection);
    }
    saturated
  }

  fn remove(&mut self, connection: &K, is_window: impl Fn(&str) -> bool) {
    if let Some(entries) = self.by_connection.get_mut(connection) {
      let before = entries.len();
      entries.retain(|entry| !is_window(&entry.window));
      self.count -= before - entries.len();
      if entries.is_empty() {
        self.by_connection.remove(connection);
      }
    }
  }

  /// Applies a usage reading (`updateAccountBuckets`): each quota whose name maps to a
  /// window key ([`window_key_for_quota`]) and whose used percentage can be derived
  /// ([`QuotaReading::used_pct`]) is recorded; the others are skipped.
  pub fn update<'a>(
    &mut self,
    connection: &K,
    quotas: impl IntoIterator<Item = (&'a str, QuotaReading)>,
    now_ms: i64,
  ) {
    for (name, reading) in quotas {
      let (Some(window), Some(used_pct)) = (window_key_for_quota(name), reading.used_pct()) else {
        continue;
      };
      self.record_usage(connection, &window, used_pct, reading.reset_at, now_ms);
    }
  }

  /// Keeps only the connections that satisfy `keep` (the bound on names drops the rest).
  pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
    let mut dropped = 0;
    self.by_connection.retain(|connection, entries| {
      let kept = keep(connection);
      if !kept {
        dropped += entries.len();
      }
      kept
    });
    self.count -= dropped;
  }

  /// How many connections have entries.
  pub fn connection_count(&self) -> usize {
    self.by_connection.len()
  }

  /// How many (connection, window) entries are stored.
  pub fn len(&self) -> usize {
    self.count
  }

  pub fn is_empty(&self) -> bool {
    self.count == 0
  }

  pub fn clear(&mut self) {
    self.by_connection.clear();
    self.count = 0;
  }
}

/// The window key of a quota named as the host's usage fetchers name them:
/// `"session (5h)"` → `5h`, `"weekly (7d)"` → `7d`, `"weekly <m> (7d)"` → `7d:<m>`
/// (`<m>` non-empty, taken as is). Any other name → `None`.
pub fn window_key_for_quota(name: &str) -> Option<String> {
  match name {
    "session (5h)" => Some(WINDOW_5H.to_string()),
    "weekly (7d)" => Some(WINDOW_7D.to_string()),
    _ => name
      .strip_prefix("weekly ")
      .and_then(|rest| rest.strip_suffix(" (7d)"))
      .filter(|model| !model.is_empty())
      .map(|model| format!("{WINDOW_7D_MODEL_PREFIX}{model}")),
  }
}

/// One quota of a usage reading, as the host's usage fetchers return it
/// (`{ used, total, remaining, remainingPercentage?, resetAt, unlimited? }`), with the
/// fields that are not finite numbers read as absent and `resetAt` already parsed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QuotaReading {
  pub used: Option<f64>,
  pub total: Option<f64>,
  pub remaining: Option<f64>,
  /// 0..100: the percentage of the quota still available.
  pub remaining_percentage: Option<f64>,
  pub unlimited: bool,
  /// `None`: the reset time is unknown.
  pub reset_at: Option<i64>,
}

impl QuotaReading {
  /// The used percentage, in order of preference: 0 for an unlimited quota;
  /// `100 − remainingPercentage`; `used / total × 100`; `(total − remaining) / total × 100`
  /// (both only with `total > 0`). `None` when none applies: the entry is malformed.
  pub fn used_pct(&self) -> Option<f64> {
    let finite = |value: Option<f64>| value.filter(|v| v.is_finite());
    if self.unlimited {
      return Some(0.0);
    }
    if let Some(remaining_pct) = finite(self.remaining_percentage) {
      return Some(100.0 - remaining_pct);
    }
    let total = finite(self.total).filter(|total| *total > 0.0)?;
    if let Some(used) = finite(self.used) {
      return Some(used / total * 100.0);
    }
    finite(self.remaining).map(|remaining| (total - remaining) / total * 100.0)
  }
}

// Saturation, the lazy reset, gating and `updateAccountBuckets` have their cases in
// __test__/account-buckets.test.mjs and __test__/scheduler.test.mjs; these are the edges the
// binding cannot pass (it reads a number that is not finite as absent).
#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn quota_names_map_to_window_keys() {
    for (name, key) in [
      ("session (5h)", Some("5h")),
      ("weekly (7d)", Some("7d")),
      ("weekly opus (7d)", Some("7d:opus")),
      ("weekly claude sonnet 4 (7d)", Some("7d:claude sonnet 4")),
      ("weekly  (7d)", None),
      ("Weekly (7d)", None),
      ("monthly (30d)", None),
      ("", None),
    ] {
      assert_eq!(window_key_for_quota(name).as_deref(), key, "{name:?}");
    }
  }

  #[test]
  fn used_pct_prefers_remaining_percentage_then_used_over_total() {
    let nan = Some(f64::NAN);
    // (used, total, remaining, remainingPercentage, used %)
    for (used, total, remaining, remaining_percentage, expected) in [
      (Some(1.0), Some(10.0), None, Some(0.0), Some(100.0)),
      (Some(5.0), Some(10.0), None, None, Some(50.0)),
      (None, Some(10.0), Some(0.0), None, Some(100.0)),
      (Some(5.0), Some(0.0), None, None, None),
      (Some(5.0), None, None, None, None),
      (nan, Some(10.0), None, nan, None),
    ] {
      let reading = QuotaReading {
        used,
        total,
        remaining,
        remaining_percentage,
        ..QuotaReading::default()
      };
      assert_eq!(reading.used_pct(), expected, "{reading:?}");
    }
  }
}
