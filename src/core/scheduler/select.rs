//! The `quota-share` selection (docs/contract.md §10, `selectQuotaShareTarget`): saturation gating,
//! the concurrency-cap partition, DRR, power-of-two-choices on in-flight counts, the
//! in-flight lease of the winner, and the four-tier fallback order.
//!
//! The result is an order over the caller's targets (indices), so the edge can hand back
//! the host's own objects.

use super::account_buckets::AccountBuckets;
use super::drr::Drr;
use super::inflight::{Inflight, DEFAULT_LEASE_MS};
use std::hash::Hash;

/// What the selection needs of one target. `K` is the key type of the scheduler's state
/// (an interned id at the edge, a string in tests).
#[derive(Debug, Clone, PartialEq)]
pub struct Target<K> {
  /// The DRR key.
  pub execution_key: K,
  /// `None`: the target has no connection — never saturated, never capped, 0 in flight.
  pub connection: Option<K>,
  /// Credited as is when finite and > 0, else as 1.
  pub weight: f64,
  /// The connection's concurrency cap; no cap unless finite and > 0.
  pub max_concurrent: f64,
}

/// The model a combo request is for: `model_str` after its first `/` (`"claude/opus-4"` →
/// `"opus-4"`), or all of it when it has no `/`.
pub fn model_of(model_str: &str) -> &str {
  model_str
    .split_once('/')
    .map_or(model_str, |(_, model)| model)
}

fn has_cap(max_concurrent: f64) -> bool {
  max_concurrent.is_finite() && max_concurrent > 0.0
}

/// Which tier a target lands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
  Room,
  AtCap,
  Saturated,
}

/// The scheduler's state: in-flight leases, account buckets and DRR deficits, plus the
/// scratch buffers a selection reuses. Plain data: the process-wide instance lives at the
/// edge, behind a mutex.
#[derive(Debug, Clone, Default)]
pub struct Scheduler<K> {
  pub inflight: Inflight<K>,
  pub buckets: AccountBuckets<K>,
  pub drr: Drr<K, K>,
  tiers: Vec<Tier>,
  room: Vec<usize>,
  room_keys: Vec<K>,
  room_weights: Vec<f64>,
  rank: Vec<usize>,
}

impl<K: Eq + Hash + Clone> Scheduler<K> {
  fn inflight_of(&self, target: &Target<K>, now_ms: i64) -> u32 {
    target
      .connection
      .as_ref()
      .map_or(0, |connection| self.inflight.get(connection, now_ms))
  }

  /// Selects among `targets` for `combo` at `now_ms` and writes the order into `order`
  /// (indices into `targets`; empty for no targets): the winner, the other targets with
  /// room in DRR rank order, the at-cap tier, the saturated tier (both in input order).
  /// The winner's connection gets an in-flight lease of [`DEFAULT_LEASE_MS`]; the caller
  /// releases it with `inflight.decrement(connection, now_ms)`.
  ///
  /// 1. Gating: a target is saturated when its connection's `5h`, `7d` or `7d:<model>`
  ///    bucket is (`model` = [`model_of`] the request's model string); when every target
  ///    is saturated, all are eligible again.
  /// 2. Caps: an eligible target whose connection has `in-flight >= cap` is at cap; when
  ///    no eligible target has room, none is.
  /// 3. DRR over the targets with room (state per `combo`, see [`Drr::round`]).
  /// 4. P2C: the DRR runner-up wins instead only with strictly fewer in flight.
  pub fn select(
    &mut self,
    targets: &[Target<K>],
    combo: &K,
    model_str: Option<&str>,
    now_ms: i64,
    order: &mut Vec<usize>,
  ) {
    order.clear();
    if targets.is_empty() {
      return;
    }
    let model = model_str.map(model_of);

    // 1. Saturation gating, with fail-open.
    let mut tiers = std::mem::take(&mut self.tiers);
    tiers.clear();
    let mut eligible = 0;
    for target in targets {
      let saturated = target
        .connection
        .as_ref()
        .is_some_and(|connection| self.buckets.is_gated(connection, model, now_ms));
      eligible += usize::from(!saturated);
      tiers.push(if saturated {
        Tier::Saturated
      } else {
        Tier::Room
      });
    }
    if eligible == 0 {
      tiers.fill(Tier::Room);
    }

    // 2. The concurrency-cap partition, with fail-open.
    let mut with_room = 0;
    for (tier, target) in tiers.iter_mut().zip(targets) {
      if *tier != Tier::Room {
        continue;
      }
      let at_cap = has_cap(target.max_concurrent)
        && f64::from(self.inflight_of(target, now_ms)) >= target.max_concurrent;
      if at_cap {
        *tier = Tier::AtCap;
      } else {
        with_room += 1;
      }
    }
    if with_room == 0 {
      for tier in tiers.iter_mut().filter(|tier| **tier == Tier::AtCap) {
        *tier = Tier::Room;
      }
    }

    // 3. DRR over the targets with room.
    self.room.clear();
    self.room_keys.clear();
    self.room_weights.clear();
    for (i, (tier, target)) in tiers.iter().zip(targets).enumerate() {
      if *tier == Tier::Room {
        self.room.push(i);
        self.room_keys.push(target.execution_key.clone());
        self.room_weights.push(target.weight);
      }
    }
    self
      .drr
      .round(combo, &self.room_keys, &self.room_weights, &mut self.rank);

    // 4. P2C between the DRR winner and the runner-up.
    let mut chosen = 0;
    if self.rank.len() > 1 {
      let winner = &targets[self.room[self.rank[0]]];
      let runner_up = &targets[self.room[self.rank[1]]];
      if self.inflight_of(runner_up, now_ms) < self.inflight_of(winner, now_ms) {
        chosen = 1;
      }
    }
    let winner = self.room[self.rank[chosen]];
    if let Some(connection) = &targets[winner].connection {
      self
        .inflight
        .increment(connection, DEFAULT_LEASE_MS, now_ms);
    }

    // The four tiers.
    order.push(winner);
    for (position, &r) in self.rank.iter().enumerate() {
      if position != chosen {
        order.push(self.room[r]);
      }
    }
    for wanted in [Tier::AtCap, Tier::Saturated] {
      order.extend((0..targets.len()).filter(|&i| tiers[i] == wanted));
    }
    self.tiers = tiers;
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  const T0: i64 = 1_000_000;

  fn target(
    key: &'static str,
    connection: Option<&'static str>,
    weight: f64,
  ) -> Target<&'static str> {
    Target {
      execution_key: key,
      connection,
      weight,
      max_concurrent: f64::NAN,
    }
  }

  fn capped(mut target: Target<&'static str>, cap: f64) -> Target<&'static str> {
    target.max_concurrent = cap;
    target
  }

  /// `A`, `B`, `C` on connections `a`, `b`, `c`, weight 1.
  fn abc() -> Vec<Target<&'static str>> {
    vec![
      target("A", Some("a"), 1.0),
      target("B", Some("b"), 1.0),
      target("C", Some("c"), 1.0),
    ]
  }

  fn select(
    scheduler: &mut Scheduler<&'static str>,
    targets: &[Target<&'static str>],
    model: Option<&str>,
  ) -> Vec<&'static str> {
    let mut order = Vec::new();
    scheduler.select(targets, &"combo", model, T0, &mut order);
    order.iter().map(|&i| targets[i].execution_key).collect()
  }

  #[test]
  fn model_is_after_the_first_slash() {
    assert_eq!(model_of("claude/opus-4"), "opus-4");
    assert_eq!(model_of("openrouter/anthropic/claude"), "anthropic/claude");
    assert_eq!(model_of("opus-4"), "opus-4");
  }

  #[test]
  fn no_targets_no_order_and_no_state() {
    let mut scheduler = Scheduler::default();
    assert!(select(&mut scheduler, &[], None).is_empty());
    assert!(scheduler.inflight.is_empty());
    assert_eq!(scheduler.drr.combo_count(), 0);
  }

  #[test]
  fn the_winner_gets_an_inflight_lease() {
    let mut scheduler = Scheduler::default();
    let order = select(&mut scheduler, &abc(), None);
    assert_eq!(order, ["A", "B", "C"]);
    assert_eq!(scheduler.inflight.get(&"a", T0), 1);
    assert_eq!(scheduler.inflight.get(&"a", T0 + DEFAULT_LEASE_MS), 0);
    assert_eq!(scheduler.inflight.len(), 1);
  }

  #[test]
  fn a_saturated_5h_or_7d_window_gates_the_target() {
    for window in ["5h", "7d"] {
      let mut scheduler = Scheduler::default();
      scheduler
        .buckets
        .record_usage(&"a", window, 100.0, Some(T0 + 1), T0);
      let order = select(&mut scheduler, &abc(), Some("p/m"));
      assert_eq!(
        order,
        ["B", "C", "A"],
        "{window}: A goes to the saturated tier"
      );
    }
  }

  #[test]
  fn the_model_window_gates_only_its_model() {
    let mut scheduler = Scheduler::default();
    scheduler
      .buckets
      .record_usage(&"a", "7d:opus", 100.0, None, T0);
    assert_eq!(
      select(&mut scheduler, &abc(), Some("claude/opus")),
      ["B", "C", "A"]
    );
    scheduler.drr.clear();
    scheduler.inflight.clear();
    assert_eq!(
      select(&mut scheduler, &abc(), Some("claude/sonnet")),
      ["A", "B", "C"],
      "another model's saturation does not gate"
    );
  }

  #[test]
  fn all_saturated_fails_open() {
    let mut scheduler = Scheduler::default();
    for connection in ["a", "b", "c"] {
      scheduler
        .buckets
        .record_usage(&connection, "5h", 100.0, None, T0);
    }
    assert_eq!(select(&mut scheduler, &abc(), None), ["A", "B", "C"]);
    assert_eq!(scheduler.inflight.get(&"a", T0), 1);
  }

  #[test]
  fn gating_ends_lazily_at_the_reset_instant() {
    let mut scheduler = Scheduler::default();
    scheduler
      .buckets
      .record_usage(&"a", "5h", 100.0, Some(T0), T0 - 10);
    let targets = abc();
    let mut order = Vec::new();
    scheduler.select(&targets, &"combo", None, T0 - 1, &mut order);
    assert_eq!(order, [1, 2, 0], "still saturated 1 ms before the reset");
    assert_eq!(scheduler.buckets.len(), 1);
    scheduler.drr.clear();
    scheduler.inflight.clear();
    scheduler.select(&targets, &"combo", None, T0, &mut order);
    assert_eq!(order, [0, 1, 2], "eligible again at the reset instant");
    assert_eq!(
      scheduler.buckets.len(),
      0,
      "the look at T0 removed the bucket"
    );
  }

  #[test]
  fn targets_without_a_connection_are_never_saturated_or_capped() {
    let mut scheduler = Scheduler::default();
    scheduler.buckets.record_usage(&"a", "5h", 100.0, None, T0);
    let targets = vec![
      target("A", Some("a"), 1.0),
      capped(target("N", None, 1.0), 1.0),
    ];
    assert_eq!(select(&mut scheduler, &targets, None), ["N", "A"]);
    assert_eq!(select(&mut scheduler, &targets, None), ["N", "A"]);
    assert!(scheduler.inflight.is_empty(), "no connection, no lease");
  }

  #[test]
  fn targets_at_their_cap_move_to_the_at_cap_tier() {
    let mut scheduler = Scheduler::default();
    scheduler.inflight.increment(&"a", DEFAULT_LEASE_MS, T0);
    let targets = vec![
      capped(target("A", Some("a"), 1.0), 1.0),
      capped(target("B", Some("b"), 1.0), 1.0),
      target("C", Some("c"), 1.0),
    ];
    assert_eq!(select(&mut scheduler, &targets, None), ["B", "C", "A"]);
    // B is now at its cap of 1 too.
    assert_eq!(select(&mut scheduler, &targets, None), ["C", "A", "B"]);
  }

  #[test]
  fn caps_that_are_not_positive_and_finite_are_no_caps() {
    for cap in [0.0, -1.0, f64::NAN, f64::INFINITY] {
      let mut scheduler = Scheduler::default();
      scheduler.inflight.increment(&"a", DEFAULT_LEASE_MS, T0);
      let targets = vec![
        capped(target("A", Some("a"), 1.0), cap),
        target("B", Some("b"), 1.0),
      ];
      let mut order = Vec::new();
      scheduler.select(&targets, &"combo", None, T0, &mut order);
      // A stays in the DRR tier: it wins the DRR round; P2C then prefers B (0 in flight).
      assert_eq!(order, [1, 0], "cap {cap}");
      assert_eq!(scheduler.drr.deficit(&"combo", &"A"), -0.5);
    }
  }

  #[test]
  fn all_at_cap_fails_open() {
    let mut scheduler = Scheduler::default();
    scheduler.inflight.increment(&"a", DEFAULT_LEASE_MS, T0);
    scheduler.inflight.increment(&"b", DEFAULT_LEASE_MS, T0);
    let targets = vec![
      capped(target("A", Some("a"), 1.0), 1.0),
      capped(target("B", Some("b"), 1.0), 1.0),
    ];
    assert_eq!(select(&mut scheduler, &targets, None), ["A", "B"]);
    assert_eq!(scheduler.inflight.get(&"a", T0), 2);
  }

  #[test]
  fn the_cap_partition_sees_only_unsaturated_targets() {
    let mut scheduler = Scheduler::default();
    scheduler.buckets.record_usage(&"b", "5h", 100.0, None, T0);
    scheduler.inflight.increment(&"a", DEFAULT_LEASE_MS, T0);
    let targets = vec![
      capped(target("A", Some("a"), 1.0), 1.0),
      target("B", Some("b"), 1.0),
    ];
    // A is the only eligible target and at cap: fail-open keeps it in the DRR tier.
    assert_eq!(select(&mut scheduler, &targets, None), ["A", "B"]);
  }

  #[test]
  fn one_target_with_room_leaves_drr_alone() {
    let mut scheduler = Scheduler::default();
    scheduler.buckets.record_usage(&"b", "5h", 100.0, None, T0);
    let targets = vec![target("A", Some("a"), 1.0), target("B", Some("b"), 1.0)];
    assert_eq!(select(&mut scheduler, &targets, None), ["A", "B"]);
    assert_eq!(scheduler.drr.combo_count(), 0);
  }

  #[test]
  fn p2c_takes_the_runner_up_only_with_strictly_fewer_inflight() {
    let mut scheduler = Scheduler::default();
    let targets = abc();
    // Ties keep the DRR winner.
    scheduler.inflight.increment(&"a", DEFAULT_LEASE_MS, T0);
    scheduler.inflight.increment(&"b", DEFAULT_LEASE_MS, T0);
    assert_eq!(select(&mut scheduler, &targets, None), ["A", "B", "C"]);
    assert_eq!(scheduler.inflight.get(&"a", T0), 2);

    // DRR now ranks B, C, A; B has 1 in flight and C none, so C wins; B comes second.
    assert_eq!(select(&mut scheduler, &targets, None), ["C", "B", "A"]);
    assert_eq!(scheduler.inflight.get(&"c", T0), 1);
    // The DRR winner paid, not the P2C winner.
    assert!((scheduler.drr.deficit(&"combo", &"B") - (2.0 / 3.0 - 1.0)).abs() < 1e-12);
  }

  #[test]
  fn the_rest_with_room_follow_the_drr_rank() {
    let mut scheduler = Scheduler::default();
    let targets = vec![
      target("A", None, 1.0),
      target("B", None, 1.0),
      target("C", None, 2.0),
    ];
    // Credits 1/4, 1/4, 1/2: C wins, then A and B tie (input order).
    assert_eq!(select(&mut scheduler, &targets, None), ["C", "A", "B"]);
    // Deficits 1/2, 1/2, 0: A, B, C.
    assert_eq!(select(&mut scheduler, &targets, None), ["A", "B", "C"]);
  }
}
