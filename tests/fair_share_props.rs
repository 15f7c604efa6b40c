//! Property tests of the fair-share decision (docs/contract.md §3) and its `retry_after_ms`.

use omniroute_quota_engine::core::dimensions::{
  effective, DimensionKey, Policy, QuotaUnit, QuotaWindow,
};
use omniroute_quota_engine::core::fair_share::{
  decay_retry_after_ms, decide_fair_share, AllocationInput, DecisionKind, DecisionReason,
  DimensionInput, FairShareDecision, FairShareInput, WindowBreakdown,
};
use proptest::num::f64::ANY;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

const CASES: u32 = 2000;

fn unit() -> impl Strategy<Value = QuotaUnit> {
  select(QuotaUnit::ALL.to_vec())
}

fn window() -> impl Strategy<Value = QuotaWindow> {
  select(QuotaWindow::ALL.to_vec())
}

fn policy() -> impl Strategy<Value = Policy> {
  select(Policy::ALL.to_vec())
}

/// Any `f64` half of the time, otherwise a number of a plausible size (so that comparisons
/// between fields are not all decided by magnitude alone).
fn number() -> impl Strategy<Value = f64> {
  prop_oneof![ANY, -10.0..2000.0f64, Just(0.0), Just(100.0), Just(1000.0)]
}

fn breakdown() -> impl Strategy<Value = WindowBreakdown> {
  (any::<i64>(), ANY, ANY, ANY, ANY).prop_map(
    |(now_ms, key_prev, key_curr, pool_prev, pool_curr)| WindowBreakdown {
      now_ms,
      key_prev,
      key_curr,
      pool_prev,
      pool_curr,
    },
  )
}

fn dimension() -> impl Strategy<Value = DimensionInput> {
  (
    "[a-z0-9-]{1,8}",
    unit(),
    window(),
    number(),
    number(),
    number(),
    option::of(breakdown()),
  )
    .prop_map(
      |(pool, unit, window, limit, consumed_total, global_used_percent, breakdown)| {
        DimensionInput {
          key: DimensionKey::new(pool, unit, window),
          limit,
          consumed_total,
          global_used_percent,
          breakdown,
        }
      },
    )
}

fn allocation() -> impl Strategy<Value = AllocationInput> {
  (number(), option::of(number()), option::of(unit()), policy()).prop_map(
    |(weight, cap_value, cap_unit, policy)| AllocationInput {
      weight,
      cap_value,
      cap_unit,
      policy,
    },
  )
}

/// Dimensions, this key's values for them (sometimes fewer than the dimensions: absent = 0),
/// and a saturation threshold.
fn scenario() -> impl Strategy<Value = (Vec<DimensionInput>, Vec<f64>, f64)> {
  prop::collection::vec(dimension(), 0..5).prop_flat_map(|dims| {
    let n = dims.len();
    (
      Just(dims),
      prop::collection::vec(number(), 0..=n + 1),
      prop_oneof![ANY, 0.0..=1.0f64],
    )
  })
}

fn decide(
  dims: &[DimensionInput],
  allocation: &AllocationInput,
  consumed: &[f64],
  threshold: f64,
) -> FairShareDecision {
  decide_fair_share(&FairShareInput {
    dimensions: dims,
    allocation,
    consumed_by_this_key: consumed,
    saturation_threshold: threshold,
  })
}

proptest! {
  #![proptest_config(ProptestConfig::with_cases(CASES))]

  /// A key at or above its absolute cap (in the dimension's unit) is never allowed.
  #[test]
  fn at_or_above_the_cap_is_never_allowed(
    (mut dims, mut consumed, threshold) in scenario(),
    extra in dimension(),
    mut allocation in allocation(),
    cap in ANY,
    over in prop_oneof![Just(0.0), 0.0..1e6f64, ANY],
    slot in any::<prop::sample::Index>(),
  ) {
    let at = slot.index(dims.len() + 1);
    dims.insert(at, extra);
    consumed.resize(dims.len(), 0.0);
    let value = cap + over.abs();
    prop_assume!(value >= cap);
    consumed[at] = value;
    allocation.cap_value = Some(cap);
    allocation.cap_unit = Some(dims[at].key.unit);
    let d = decide(&dims, &allocation, &consumed, threshold);
    prop_assert_eq!(d.kind, DecisionKind::Block);
    prop_assert!(d.blocking_dimension.unwrap() <= at);
    if d.blocking_dimension == Some(at) {
      prop_assert_eq!(d.reason, DecisionReason::CapAbsolute);
    }
  }

  /// A dimension whose pool total is at or above its limit never allows.
  #[test]
  fn a_full_pool_never_allows(
    (mut dims, consumed, threshold) in scenario(),
    mut extra in dimension(),
    allocation in allocation(),
    over in prop_oneof![Just(0.0), 0.0..1e6f64, ANY],
    slot in any::<prop::sample::Index>(),
  ) {
    let total = extra.limit + over.abs();
    prop_assume!(total >= extra.limit);
    extra.consumed_total = total;
    let at = slot.index(dims.len() + 1);
    dims.insert(at, extra);
    let d = decide(&dims, &allocation, &consumed, threshold);
    prop_assert_eq!(d.kind, DecisionKind::Block);
    prop_assert!(d.blocking_dimension.unwrap() <= at);
  }

  /// No dimensions: always an allow, never penalized.
  #[test]
  fn no_dimensions_always_allows(
    allocation in allocation(),
    consumed in prop::collection::vec(ANY, 0..4),
    threshold in ANY,
  ) {
    prop_assert_eq!(decide(&[], &allocation, &consumed, threshold), FairShareDecision::allow(false));
  }

  /// An unknown policy string decides exactly like `hard`.
  #[test]
  fn unknown_policy_decides_like_hard(
    (dims, consumed, threshold) in scenario(),
    mut allocation in allocation(),
    name in prop_oneof!["\\PC{0,12}", Just("HARD".to_string()), Just("Soft".to_string()), Just(" burst".to_string())],
  ) {
    prop_assume!(Policy::parse(&name).is_none());
    allocation.policy = Policy::parse_lenient(&name);
    let unknown = decide(&dims, &allocation, &consumed, threshold);
    allocation.policy = Policy::Hard;
    prop_assert_eq!(unknown, decide(&dims, &allocation, &consumed, threshold));
  }

  /// Any `f64` anywhere, breakdowns included: no panic, and the result is well formed.
  #[test]
  fn never_panics_and_is_well_formed(
    dims in prop::collection::vec(
      (unit(), window(), ANY, ANY, ANY, option::of(breakdown())).prop_map(
        |(unit, window, limit, consumed_total, global_used_percent, breakdown)| DimensionInput {
          key: DimensionKey::new("p", unit, window),
          limit,
          consumed_total,
          global_used_percent,
          breakdown,
        },
      ),
      0..5,
    ),
    weight in ANY,
    cap_value in option::of(ANY),
    cap_unit in option::of(unit()),
    policy in policy(),
    consumed in prop::collection::vec(ANY, 0..6),
    threshold in ANY,
  ) {
    let allocation = AllocationInput { weight, cap_value, cap_unit, policy };
    let d = decide(&dims, &allocation, &consumed, threshold);
    match d.kind {
      DecisionKind::Allow => {
        prop_assert_eq!(d.reason, DecisionReason::Ok);
        prop_assert_eq!(d.retry_after_ms, None);
        prop_assert_eq!(d.blocking_dimension, None);
      }
      DecisionKind::Block => {
        prop_assert_ne!(d.reason, DecisionReason::Ok);
        prop_assert!(!d.penalized);
        prop_assert!(d.blocking_dimension.unwrap() < dims.len());
        if let Some(retry) = d.retry_after_ms {
          prop_assert!(retry >= 1);
        }
      }
    }
  }

  /// `decay_retry_after_ms` on any input: never panics; a `Some` is ≥ 1, at most the
  /// rollover, and exact (clear at `now + t`, still blocked at `now + t − 1`).
  #[test]
  fn retry_is_exact_whenever_given(
    prev in ANY,
    curr in ANY,
    threshold in ANY,
    now in any::<i64>(),
    window in window(),
  ) {
    let w = window.ms();
    if let Some(t) = decay_retry_after_ms(prev, curr, threshold, now, w) {
      let elapsed = now.rem_euclid(w);
      prop_assert!(t >= 1 && t <= w - elapsed);
      let value = |t: i64| prev * (1.0 - (elapsed + t) as f64 / w as f64) + curr;
      prop_assert!(value(t) < threshold);
      if t > 1 {
        prop_assert!(value(t - 1) >= threshold);
      }
    }
  }

  /// For plausible counters the retry is always computable, and agrees with the
  /// sliding-window module itself read at `now + t`.
  #[test]
  fn retry_is_computable_and_agrees_with_the_counter(
    prev in 1.0..1e9f64,
    curr in 0.0..1e5f64,
    fraction in 1e-6..1.0f64,
    now in 0i64..4_000_000_000_000,
    window in window(),
  ) {
    let w = window.ms();
    let threshold = curr + fraction * prev;
    let t = decay_retry_after_ms(prev, curr, threshold, now, w);
    prop_assert!(t.is_some(), "prev {} curr {} threshold {}", prev, curr, threshold);
    let t = t.unwrap();
    let rollover = (now.div_euclid(w) + 1) * w;
    let after = if now + t == rollover { curr } else { effective(prev, curr, now + t, w) };
    prop_assert!(after < threshold);
    if t > 1 {
      prop_assert!(effective(prev, curr, now + t - 1, w) >= threshold);
    }
  }
}
