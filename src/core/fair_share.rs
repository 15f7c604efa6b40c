//! The fair-share decision of docs/contract.md §3: pure, synchronous, and total — it never panics,
//! whatever `f64` it is given.
//!
//! NaN semantics: every rule is a `>=` comparison, and a comparison with NaN is false, so a
//! rule whose operands include NaN does not block (and does not penalize). That is what the
//! host's TypeScript did (`NaN >= x` is `false` in JavaScript); rule 4 and rule 5 are the
//! fail-safe ones only for numbers.

use crate::core::dimensions::{
  elapsed_in_bucket, named_enum, prev_weight, DimensionKey, Policy, QuotaUnit,
};

/// This key's and the pool's two sliding-window buckets for one dimension, read at
/// `now_ms`. Optional: with it, a block carries `retry_after_ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowBreakdown {
  /// The time the buckets were read at (epoch ms).
  pub now_ms: i64,
  /// This key's previous bucket.
  pub key_prev: f64,
  /// This key's current bucket.
  pub key_curr: f64,
  /// The pool's previous bucket (summed over every key).
  pub pool_prev: f64,
  /// The pool's current bucket (summed over every key).
  pub pool_curr: f64,
}

/// One quota dimension as the decision sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct DimensionInput {
  pub key: DimensionKey,
  /// The pool-wide ceiling (already multiplied by the number of member connections).
  pub limit: f64,
  /// What the whole pool consumed in the window.
  pub consumed_total: f64,
  /// The upstream's own saturation, 0..1.
  pub global_used_percent: f64,
  /// The buckets behind `consumed_total` and this key's value, for `retry_after_ms`.
  /// Leave it `None` where the pool's value is not a sliding-window sum (percent
  /// dimensions, whose `consumed_total` is `global_used_percent × limit`).
  pub breakdown: Option<WindowBreakdown>,
}

/// The key's allocation in the pool. The policy is already read with
/// [`Policy::parse_lenient`], so an unknown stored policy arrives here as `Hard`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllocationInput {
  /// 0..=100.
  pub weight: f64,
  pub cap_value: Option<f64>,
  pub cap_unit: Option<QuotaUnit>,
  pub policy: Policy,
}

/// Everything [`decide_fair_share`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct FairShareInput<'a> {
  pub dimensions: &'a [DimensionInput],
  pub allocation: &'a AllocationInput,
  /// This key's consumption, parallel to `dimensions`: entry `i` belongs to
  /// `dimensions[i]`. A missing entry (the slice is shorter) counts as 0, like an absent
  /// key of the host's `consumedByThisKey` map.
  pub consumed_by_this_key: &'a [f64],
  /// At or above this `global_used_percent` a dimension is in strict mode.
  pub saturation_threshold: f64,
}

named_enum! {
  /// `"allow"` or `"block"`.
  pub enum DecisionKind {
    Allow = "allow",
    Block = "block",
  }
}

named_enum! {
  /// Why the decision came out the way it did.
  pub enum DecisionReason {
    Ok = "ok",
    FairShare = "fair-share",
    CapAbsolute = "cap-absolute",
    GlobalSaturated = "global-saturated",
  }
}

/// The outcome: a value, never an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairShareDecision {
  pub kind: DecisionKind,
  pub reason: DecisionReason,
  /// Only on an allow: some soft-policy dimension is at or over its fair share
  /// (JS `penalized: true`; absent when false). Always false on a block.
  pub penalized: bool,
  /// Only on a block, and only when computable: the whole milliseconds until the decay of
  /// the previous bucket alone clears the blocking condition (≥ 1).
  pub retry_after_ms: Option<i64>,
  /// Only on a block: the index of the dimension that blocked.
  pub blocking_dimension: Option<usize>,
}

impl FairShareDecision {
  /// An allow, `reason: "ok"`.
  pub fn allow(penalized: bool) -> Self {
    FairShareDecision {
      kind: DecisionKind::Allow,
      reason: DecisionReason::Ok,
      penalized,
      retry_after_ms: None,
      blocking_dimension: None,
    }
  }

  fn block(reason: DecisionReason, dimension: usize, retry_after_ms: Option<i64>) -> Self {
    FairShareDecision {
      kind: DecisionKind::Block,
      reason,
      penalized: false,
      retry_after_ms,
      blocking_dimension: Some(dimension),
    }
  }
}

/// Whose buckets a block is about.
#[derive(Clone, Copy)]
enum Side {
  Key,
  Pool,
}

/// docs/contract.md §3, rules 1–8, for each dimension in input order; the first block wins.
pub fn decide_fair_share(input: &FairShareInput<'_>) -> FairShareDecision {
  let allocation = input.allocation;
  let mut penalized = false;

  for (index, dim) in input.dimensions.iter().enumerate() {
    let consumed = input
      .consumed_by_this_key
      .get(index)
      .copied()
      .unwrap_or(0.0);
    let fair_share = allocation.weight / 100.0 * dim.limit;
    let block = |reason, side, threshold| {
      FairShareDecision::block(reason, index, retry_for(dim, side, threshold))
    };

    // Rule 4: the absolute cap, in the dimension's own unit, whatever the mode or policy.
    if let (Some(cap), Some(cap_unit)) = (allocation.cap_value, allocation.cap_unit) {
      if cap_unit == dim.key.unit && consumed >= cap {
        return block(DecisionReason::CapAbsolute, Side::Key, cap);
      }
    }

    // Rule 5: the pool ceiling.
    if dim.consumed_total >= dim.limit {
      return block(DecisionReason::GlobalSaturated, Side::Pool, dim.limit);
    }

    let strict = dim.global_used_percent >= input.saturation_threshold;
    match allocation.policy {
      // Rule 6, hard: held to the weighted share.
      Policy::Hard if strict => {
        if consumed >= fair_share {
          return block(DecisionReason::FairShare, Side::Key, fair_share);
        }
      }
      // Rule 7, hard: may borrow up to the whole limit.
      Policy::Hard => {
        if consumed >= dim.limit {
          return block(DecisionReason::GlobalSaturated, Side::Key, dim.limit);
        }
      }
      // Rules 6 and 7, soft: over the share is only a penalty, in either mode.
      Policy::Soft => {
        if consumed >= fair_share {
          penalized = true;
        }
      }
      Policy::Burst => {}
    }
  }

  FairShareDecision::allow(penalized)
}

fn retry_for(dim: &DimensionInput, side: Side, threshold: f64) -> Option<i64> {
  let b = dim.breakdown?;
  let (prev, curr) = match side {
    Side::Key => (b.key_prev, b.key_curr),
    Side::Pool => (b.pool_prev, b.pool_curr),
  };
  decay_retry_after_ms(prev, curr, threshold, b.now_ms, dim.key.window.ms())
}

/// The smallest whole `t ≥ 1` ms after `now_ms` at which the sliding-window value
/// `prev × (1 − (e + t) / W) + curr` (`e` = elapsed in the current bucket, `W` =
/// `window_ms`) is below `threshold`, i.e. when a `value >= threshold` block clears by the
/// decay of `prev` alone. At most `W − e`, the bucket rollover, where `prev`'s weight is 0.
///
/// `None` when decay alone cannot clear it (`curr >= threshold`, `prev <= 0`), when an input
/// is not finite or `window_ms <= 0`, or in the rare case where `f64` rounding makes the
/// closed form disagree with the formula by more than one millisecond (a `curr` millions of
/// times larger than `prev`): a `Some` is always exact for the formula above.
pub fn decay_retry_after_ms(
  prev: f64,
  curr: f64,
  threshold: f64,
  now_ms: i64,
  window_ms: i64,
) -> Option<i64> {
  if window_ms <= 0 || !prev.is_finite() || !curr.is_finite() || !threshold.is_finite() {
    return None;
  }
  if curr >= threshold || prev <= 0.0 {
    return None;
  }
  let elapsed = elapsed_in_bucket(now_ms, window_ms);
  let horizon = window_ms - elapsed; // ≥ 1: the rollover.
  let blocked_at = |t: i64| prev * prev_weight(elapsed + t, window_ms) + curr >= threshold;

  // prev·(1 − (e+t)/W) + curr < threshold  ⇔  t > W·(1 − (threshold − curr)/prev) − e.
  let x = window_ms as f64 * (1.0 - (threshold - curr) / prev) - elapsed as f64;
  if x.is_nan() {
    return None;
  }
  // `horizon as f64` may round up past `horizon` for windows near `i64::MAX`: clamp the
  // integer too, so `elapsed + t` never overflows.
  let mut t = ((x.floor() + 1.0).clamp(1.0, horizon as f64) as i64).min(horizon);

  // One step of correction for the rounding of the closed form.
  if blocked_at(t) {
    if t < horizon {
      t += 1;
    }
  } else if t > 1 && !blocked_at(t - 1) {
    t -= 1;
  }
  let exact = !blocked_at(t) && (t == 1 || blocked_at(t - 1));
  exact.then_some(t)
}
