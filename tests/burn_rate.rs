//! The burn rate (docs/contract.md §9): an EMA of the usable samples, and the rate over a
//! window's two buckets.

use omniroute_quota_engine::core::burn_rate::*;

const H: i64 = 3_600_000;

fn close(a: f64, b: f64) -> bool {
  (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

/// An empty history, one sample and a duplicate timestamp are __test__/core.test.mjs's
/// and pure-crossings.test.mjs's; a sample that is not a number is skipped.
#[test]
fn samples_that_are_not_numbers_are_skipped() {
  let history = [(f64::NAN, 1.0), (1000.0, f64::NAN), (2000.0, 3.0)];
  assert_eq!(compute_burn_rate(&history, Some(100.0)), BurnRate::ZERO);
}

#[test]
fn the_rate_is_an_ema_of_the_usable_samples() {
  // (rate, history of (ts ms, consumed)); remaining is 10 s of the rate.
  let cases: [(f64, &[(i32, i32)]); 8] = [
    // 100 tokens over 2 s.
    (50.0, &[(10_000, 0), (12_000, 100)]),
    // Rates 10/s, 20/s, 40/s: 10 → 0.3·20 + 0.7·10 = 13 → 0.3·40 + 0.7·13 = 21.1.
    (21.1, &[(0, 0), (1000, 10), (2000, 30), (3000, 70)]),
    // (1200, 0) is earlier than the last used sample (1500): skipped, and (2000, 25)
    // is measured from (1500, 10): 20/s, then 30/s → 0.3·30 + 0.7·20 = 23.
    (23.0, &[(1000, 0), (1500, 10), (1200, 0), (2000, 25)]),
    // Later samples that do not move forward in time leave fewer than two: 0.
    (0.0, &[(1000, 5), (1000, 50), (900, 70)]),
    // A duplicate timestamp is skipped too.
    (10.0, &[(1000, 0), (1000, 500), (2000, 10)]),
    // A negative rate clamps to 0, but only the final EMA: −50/s then +10/s → −32 → 0;
    // a later burst pulls it back up: 0.3·200 + 0.7·(−32) = 37.6.
    (0.0, &[(0, 100), (1000, 50)]),
    (0.0, &[(0, 100), (1000, 50), (2000, 60)]),
    (37.6, &[(0, 100), (1000, 50), (2000, 60), (3000, 260)]),
  ];
  for (rate, history) in cases {
    let history: Vec<(f64, f64)> = history
      .iter()
      .map(|&(ts, consumed)| (f64::from(ts), f64::from(consumed)))
      .collect();
    let r = compute_burn_rate(&history, Some(rate * 10.0));
    assert!(close(r.tokens_per_second, rate), "{history:?}: {r:?}");
    let exhaustion = r.time_to_exhaustion_ms.map(f64::round);
    assert_eq!(exhaustion, (rate > 0.0).then_some(10_000.0), "{r:?}");
  }
}

#[test]
fn exhaustion_needs_a_non_negative_finite_remaining() {
  let history = [(0.0, 0.0), (1000.0, 10.0)];
  for (remaining, expected) in [
    (Some(0.0), Some(0.0)),
    (Some(-1.0), None),
    (None, None),
    (Some(f64::NAN), None),
    (Some(f64::INFINITY), None),
  ] {
    let r = compute_burn_rate(&history, remaining);
    assert_eq!(r.time_to_exhaustion_ms, expected, "{remaining:?}");
  }
}

#[test]
fn from_window_hand_computed() {
  // (consumed, now, remaining, rate, time to exhaustion) in an hourly window. That the
  // bucket start counts as 1 ms is pure-crossings.test.mjs's (a window of 1 ms).
  let cases = [
    // 30 minutes into the bucket, 3600 tokens → 2/s; 7200 remaining → 3600 s.
    (3600.0, 5 * H + H / 2, Some(7200.0), 2.0, Some(3_600_000.0)),
    (10.0, 2 * H + 250, None, 40.0, None),
    // −0.5 h is 30 minutes into the bucket that starts at −1 h.
    (3600.0, -H / 2, None, 2.0, None),
  ];
  for (consumed, now, remaining, rate, exhaustion) in cases {
    let r = compute_burn_rate_from_window(consumed, H, now, remaining);
    assert_eq!(r.tokens_per_second, rate, "{consumed} at {now}");
    assert_eq!(r.time_to_exhaustion_ms, exhaustion, "{consumed} at {now}");
  }
}

#[test]
fn from_window_zero_or_bad_input_is_zero() {
  for (consumed, window) in [
    (0.0, H),
    (-3.0, H),
    (f64::NAN, H),
    (f64::INFINITY, H),
    (10.0, 0),
    (10.0, -H),
  ] {
    let r = compute_burn_rate_from_window(consumed, window, H / 2, Some(1.0));
    assert_eq!(r, BurnRate::ZERO, "{consumed} over {window}");
  }
}
