//! The fair-share decision's cases (docs/contract.md §3), one rule each; the properties
//! are in `fair_share_props.rs`.

use omniroute_quota_engine::core::dimensions::*;
use omniroute_quota_engine::core::fair_share::*;
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
