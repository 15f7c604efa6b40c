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

#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::dimensions::QuotaWindow;
  use DecisionReason::{CapAbsolute, FairShare, GlobalSaturated};

  const H: i64 = 3_600_000;

  fn dim(unit: QuotaUnit, limit: f64, consumed_total: f64, used: f64) -> DimensionInput {
    DimensionInput {
      key: DimensionKey::new("pool", unit, QuotaWindow::Hourly),
      limit,
      consumed_total,
      global_used_percent: used,
      breakdown: None,
    }
  }

  fn alloc(weight: f64, policy: Policy) -> AllocationInput {
    AllocationInput {
      weight,
      cap_value: None,
      cap_unit: None,
      policy,
    }
  }

  fn decide(dims: &[DimensionInput], a: &AllocationInput, consumed: &[f64]) -> FairShareDecision {
    decide_fair_share(&FairShareInput {
      dimensions: dims,
      allocation: a,
      consumed_by_this_key: consumed,
      saturation_threshold: 0.5,
    })
  }

  fn assert_block(d: FairShareDecision, reason: DecisionReason, dimension: usize) {
    assert_eq!(d.kind, DecisionKind::Block, "{d:?}");
    assert_eq!(d.reason, reason, "{d:?}");
    assert_eq!(d.blocking_dimension, Some(dimension), "{d:?}");
    assert!(!d.penalized);
  }

  fn assert_allow(d: FairShareDecision, penalized: bool) {
    assert_eq!(d, FairShareDecision::allow(penalized), "{d:?}");
  }

  const STRICT: f64 = 0.9;
  const GENEROUS: f64 = 0.1;

  /// Rules 4–7 at their edges, one dimension of 1000 tokens. That nothing at or over a cap
  /// or a full pool is allowed, that an unknown policy is `hard` and that no dimensions
  /// allow are the properties of tests/fair_share_props.rs.
  #[test]
  fn each_rule_blocks_or_penalizes_at_exactly_its_threshold() {
    use DecisionReason::{CapAbsolute as Cap, FairShare as Share, GlobalSaturated as Full};
    use Policy::{Burst, Hard, Soft};
    use QuotaUnit::{Tokens, Usd};
    let tokens = |total, used| [dim(Tokens, 1000.0, total, used)];

    // Rule 4: the absolute cap of 50, in the dimension's unit only, before the ceiling.
    let capped = |unit, total, consumed| {
      let a = AllocationInput {
        cap_value: Some(50.0),
        cap_unit: unit,
        ..alloc(100.0, Hard)
      };
      decide(&tokens(total, STRICT), &a, &[consumed])
    };
    assert_block(capped(Some(Tokens), 0.0, 50.0), Cap, 0);
    assert_block(capped(Some(Tokens), 1000.0, 50.0), Cap, 0);
    assert_allow(capped(Some(Tokens), 0.0, 49.999), false);
    assert_allow(capped(Some(Usd), 0.0, 500.0), false);
    assert_allow(capped(None, 0.0, 500.0), false);

    // An absent value of this key counts as 0 (a zero share blocks it in strict mode).
    assert_block(
      decide(&tokens(0.0, STRICT), &alloc(0.0, Hard), &[]),
      Share,
      0,
    );
    assert_allow(decide(&tokens(0.0, STRICT), &alloc(10.0, Hard), &[]), false);

    // (policy, weight, pool total, global used, this key's value, expected): `Err(reason)`
    // a block, `Ok(penalized)` an allow.
    let cases = [
      // Rule 5: the pool ceiling, for every policy.
      (Burst, 100.0, 1000.0, GENEROUS, 0.0, Err(Full)),
      (Soft, 100.0, 1e9, GENEROUS, 0.0, Err(Full)),
      (Hard, 100.0, 999.999, GENEROUS, 0.0, Ok(false)),
      // Strict mode starts at exactly the threshold (0.5).
      (Hard, 50.0, 700.0, 0.5, 600.0, Err(Share)),
      (Hard, 50.0, 700.0, 0.499_999, 600.0, Ok(false)),
      // Rule 6, strict: hard is held to its share, soft only penalized, burst neither.
      (Hard, 50.0, 900.0, STRICT, 500.0, Err(Share)),
      (Hard, 50.0, 900.0, STRICT, 499.999, Ok(false)),
      (Soft, 50.0, 900.0, STRICT, 500.0, Ok(true)),
      (Soft, 50.0, 900.0, STRICT, 800.0, Ok(true)),
      (Soft, 50.0, 900.0, STRICT, 499.999, Ok(false)),
      (Burst, 50.0, 999.0, STRICT, 999.0, Ok(false)),
      // Rule 7, generous: hard borrows up to the limit, soft is penalized over its share.
      (Hard, 10.0, 999.0, GENEROUS, 999.0, Ok(false)),
      (Hard, 10.0, 999.0, GENEROUS, 1000.0, Err(Full)),
      (Soft, 10.0, 500.0, GENEROUS, 100.0, Ok(true)),
      (Soft, 10.0, 500.0, GENEROUS, 99.999, Ok(false)),
      (Soft, 10.0, 500.0, GENEROUS, 5000.0, Ok(true)),
      (Burst, 10.0, 500.0, GENEROUS, 5000.0, Ok(false)),
      // A zero share blocks even an idle hard key in strict mode; generous, it borrows.
      (Hard, 0.0, 600.0, STRICT, 0.0, Err(Share)),
      (Soft, 0.0, 600.0, STRICT, 0.0, Ok(true)),
      (Burst, 0.0, 600.0, STRICT, 0.0, Ok(false)),
      (Hard, 0.0, 600.0, GENEROUS, 500.0, Ok(false)),
    ];
    for (policy, weight, total, used, consumed, expected) in cases {
      let d = decide(&tokens(total, used), &alloc(weight, policy), &[consumed]);
      match expected {
        Ok(penalized) => assert_allow(d, penalized),
        Err(reason) => assert_block(d, reason, 0),
      }
    }
  }

  #[test]
  fn first_block_wins_across_dimensions() {
    let mut a = alloc(50.0, Policy::Hard);
    a.cap_value = Some(10.0);
    a.cap_unit = Some(QuotaUnit::Usd);
    let dims = [
      dim(QuotaUnit::Tokens, 1000.0, 100.0, GENEROUS), // passes
      dim(QuotaUnit::Requests, 100.0, 100.0, GENEROUS), // pool ceiling
      dim(QuotaUnit::Usd, 50.0, 0.0, GENEROUS),        // cap-absolute, later
    ];
    assert_block(decide(&dims, &a, &[1.0, 1.0, 20.0]), GlobalSaturated, 1);
    let reordered = [dims[2].clone(), dims[1].clone(), dims[0].clone()];
    assert_block(decide(&reordered, &a, &[20.0, 1.0, 1.0]), CapAbsolute, 0);
  }

  #[test]
  fn penalized_only_when_some_dimension_penalized() {
    let a = alloc(50.0, Policy::Soft);
    let dims = [
      dim(QuotaUnit::Tokens, 1000.0, 100.0, GENEROUS),
      dim(QuotaUnit::Requests, 100.0, 10.0, GENEROUS),
    ];
    assert_allow(decide(&dims, &a, &[10.0, 10.0]), false);
    assert_allow(decide(&dims, &a, &[10.0, 50.0]), true);
    assert_allow(decide(&dims, &a, &[600.0, 10.0]), true);
    // A later block drops the penalty: a block is never penalized.
    let blocking = [dims[0].clone(), dim(QuotaUnit::Usd, 5.0, 5.0, GENEROUS)];
    assert_block(decide(&blocking, &a, &[600.0, 0.0]), GlobalSaturated, 1);
  }

  #[test]
  fn nan_does_not_block() {
    // Infinities are plain numbers to the rules: a_full_pool_never_allows and
    // never_panics_and_is_well_formed of tests/fair_share_props.rs draw them.
    let a = alloc(f64::NAN, Policy::Hard);
    let dims = [dim(QuotaUnit::Tokens, f64::NAN, f64::NAN, f64::NAN)];
    assert_allow(decide(&dims, &a, &[f64::NAN]), false);
  }

  // ── retry_after_ms ────────────────────────────────────────────────────────────────────

  // `decay_retry_after_ms` itself: that every `Some` is exact (clear at `now + t`, still
  // blocked a millisecond before, which fixes its value) and that plausible counters get
  // one are properties of tests/fair_share_props.rs; windows ≤ 0 or near `i64::MAX`, of
  // `fuzz_decay_retry_after` in tests/fuzz.rs.

  #[test]
  fn retry_none_when_decay_does_not_clear() {
    // Already clear without it (prev ≤ 0), never clear by it (curr ≥ threshold), or a
    // threshold that is not a number.
    for (prev, curr, threshold) in [
      (0.0, 10.0, 60.0),
      (-5.0, 10.0, 60.0),
      (100.0, 60.0, 60.0),
      (100.0, 10.0, f64::INFINITY),
    ] {
      assert_eq!(decay_retry_after_ms(prev, curr, threshold, 7 * H, H), None);
    }
  }

  #[test]
  fn blocks_carry_the_retry_of_their_own_buckets() {
    let b = WindowBreakdown {
      now_ms: 10 * H, // start of a bucket
      key_prev: 100.0,
      key_curr: 0.0,
      pool_prev: 2000.0,
      pool_curr: 0.0,
    };
    let capped = AllocationInput {
      cap_value: Some(50.0),
      cap_unit: Some(QuotaUnit::Tokens),
      ..alloc(50.0, Policy::Hard)
    };
    // (allocation, limit, pool total, global used, reason, retry): which buckets decay
    // and to which threshold.
    let cases = [
      // Key buckets to the cap 50: 100·(1 − t/H) < 50.
      (capped, 1000.0, 300.0, GENEROUS, CapAbsolute, H / 2 + 1),
      // Pool buckets to the limit: 2000·(1 − t/H) < 1000.
      (
        alloc(50.0, Policy::Burst),
        1000.0,
        2000.0,
        GENEROUS,
        GlobalSaturated,
        H / 2 + 1,
      ),
      // Key buckets to the strict fair share 25: 100·(1 − t/H) < 25.
      (
        alloc(2.5, Policy::Hard),
        1000.0,
        300.0,
        STRICT,
        FairShare,
        3 * H / 4 + 1,
      ),
      // Key buckets to the limit 80 (generous hard): 100·(1 − t/H) < 80.
      (
        alloc(10.0, Policy::Hard),
        80.0,
        79.0,
        GENEROUS,
        GlobalSaturated,
        H / 5 + 1,
      ),
    ];
    for (a, limit, total, used, reason, retry) in cases {
      let without = dim(QuotaUnit::Tokens, limit, total, used);
      let with = DimensionInput {
        breakdown: Some(b),
        ..without.clone()
      };
      let d = decide(&[with], &a, &[100.0]);
      assert_block(d, reason, 0);
      assert_eq!(d.retry_after_ms, Some(retry), "{reason:?}");
      // Without a breakdown there is no retry.
      assert_eq!(decide(&[without], &a, &[100.0]).retry_after_ms, None);
    }
    // Nor when the current bucket alone blocks.
    let curr_alone = WindowBreakdown {
      key_prev: 0.0,
      key_curr: 100.0,
      ..b
    };
    let dims = [DimensionInput {
      breakdown: Some(curr_alone),
      ..dim(QuotaUnit::Tokens, 1000.0, 100.0, GENEROUS)
    }];
    let d = decide(&dims, &capped, &[100.0]);
    assert_block(d, CapAbsolute, 0);
    assert_eq!(d.retry_after_ms, None);
  }
}
