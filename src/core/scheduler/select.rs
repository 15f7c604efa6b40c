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
  /// room but not the winner's execution key, the at-cap tier, the saturated tier (each
  /// in input order).
  /// The winner's connection gets an in-flight lease of [`DEFAULT_LEASE_MS`]; the caller
  /// releases it with `inflight.decrement(connection, now_ms)`.
  ///
  /// 1. Gating: a target is saturated when its connection's `5h`, `7d` or `7d:<model>`
  ///    bucket is (`model` = [`model_of`] the request's model string); when every target
  ///    is saturated, all are eligible again.
  /// 2. Caps: an eligible target whose connection has `in-flight >= cap` is at cap; when
  ///    no eligible target has room, none is.
  /// 3. DRR over the targets with room (state per `combo`, see [`Drr::round`]).
  /// 4. P2C: the first of the rest with room wins instead only with strictly fewer in
  ///    flight.
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
    let Some(drr_winner) = self.drr.round(combo, &self.room_keys, &self.room_weights) else {
      unreachable!("with no target with room, every target has room");
    };
    let mut winner = self.room[drr_winner];
    // The rest with room follow in input order, without the winner's execution key: a
    // target given twice is dispatched once.
    let winner_key = &self.room_keys[drr_winner];
    let rest = self.room_keys.iter().zip(&self.room);
    order.push(winner);
    order.extend(rest.filter(|(key, _)| *key != winner_key).map(|(_, &i)| i));

    // 4. P2C: the first of the rest wins instead only with strictly fewer in flight, and
    //    the DRR winner comes second.
    if order.len() > 1
      && self.inflight_of(&targets[order[1]], now_ms) < self.inflight_of(&targets[winner], now_ms)
    {
      order.swap(0, 1);
      winner = order[0];
    }
    if let Some(connection) = &targets[winner].connection {
      self
        .inflight
        .increment(connection, DEFAULT_LEASE_MS, now_ms);
    }

    // The at-cap and saturated tiers, in input order.
    for wanted in [Tier::AtCap, Tier::Saturated] {
      order.extend((0..targets.len()).filter(|&i| tiers[i] == wanted));
    }
    self.tiers = tiers;
  }
}

// Each rule of the selection has its case in __test__/scheduler.test.mjs, and
// __test__/scheduler-differential.test.mjs compares whole runs with a plain-JS reading of §10.
#[cfg(test)]
#[test]
fn the_model_is_after_the_first_slash() {
  assert_eq!(model_of("claude/opus-4"), "opus-4");
  assert_eq!(model_of("openrouter/anthropic/claude"), "anthropic/claude");
  assert_eq!(model_of("opus-4"), "opus-4");
}
