//! What can be proven about the two-bucket estimate (docs/contract.md §2) against an exact sliding
//! log of the same requests. `examples/window_accuracy.rs` prints the measured error
//! distribution (the README table); this file asserts the properties behind it:
//!
//! - the estimate is never negative;
//! - with the previous bucket empty it *is* the exact count, at any instant (so at every
//!   bucket boundary after an idle bucket);
//! - the error always lies in `[−prev · e, prev · (1 − e)]` (`e` = elapsed share of the
//!   current bucket): the formula assumes `prev`'s requests were spread evenly, and the
//!   error is how far they were not;
//! - steady, evenly spaced traffic is exact to within one request;
//! - the boundary case (100 requests at 0.9 W, 100 at 1.1 W) reaches that bound: −10 just
//!   after the second batch, −90 (−45 % of the exact 200) just before 1.9 W, +10 after it.

mod window_support;

use proptest::prelude::*;
use window_support::*;

/// Float slack for sums of a few thousand unit requests.
const EPS: f64 = 1e-9;

fn assert_within_bound(s: &Sample) {
  let (lo, hi) = (-s.prev * s.elapsed_share, s.prev * (1.0 - s.elapsed_share));
  assert!(
    s.error() >= lo - EPS && s.error() <= hi + EPS,
    "error {} outside [{lo}, {hi}] at {s:?}",
    s.error()
  );
}

#[test]
fn never_negative_and_always_within_the_bound() {
  for (traffic, from, to) in scenarios() {
    for s in traffic.samples(from, to, 5_000) {
      assert!(s.estimate >= 0.0, "{}: negative at {s:?}", traffic.name);
      assert_within_bound(&s);
    }
  }
}

#[test]
fn steady_uniform_traffic_is_exact_within_one_request() {
  let traffic = steady_uniform(1000, 4);
  let samples = traffic.samples(W, 4 * W, 20_000);
  let worst = samples.iter().map(|s| s.error().abs()).fold(0.0, f64::max);
  assert!(worst <= 1.0 + EPS, "worst error {worst} requests");
  // Within 0.1 % of the window's 1 000 requests.
  for s in &samples {
    assert!(s.exact >= 999.0, "{s:?}");
    assert!(s.error().abs() / s.exact <= 1.0 / 999.0 + EPS);
  }
}

#[test]
fn with_the_previous_bucket_empty_the_estimate_is_exact() {
  // Traffic in buckets 0, 2 and 4 only: every instant of buckets 1, 3 and 5 follows a
  // busy bucket, every instant of 2 and 4 follows an empty one.
  let mut rng = SplitMix::new(3);
  let times: Vec<i64> = (0..3000)
    .map(|_| {
      let bucket = 2 * rng.range(0, 3);
      bucket * W + rng.range(0, W)
    })
    .collect();
  let traffic = Traffic::new("alternate buckets", times, W);
  let mut checked = 0;
  for s in traffic.samples(0, 6 * W, 6_000) {
    if s.prev == 0.0 {
      assert_eq!(s.estimate, s.exact, "{s:?}");
      checked += 1;
    }
  }
  assert!(
    checked > 2_000,
    "only {checked} instants had an empty previous bucket"
  );
  // At the boundary itself (elapsed 0) after an empty bucket: the estimate is curr,
  // which is exact.
  for k in [2, 4] {
    let s = traffic.sample(k * W);
    assert_eq!(s.prev, 0.0);
    assert_eq!(s.estimate, s.exact, "{s:?}");
  }
}

#[test]
fn the_boundary_case_reaches_the_known_worst_error() {
  let traffic = boundary();
  // Just after the second batch (e = 0.1): prev counts 90 %, the exact log 100 %.
  let s = traffic.sample(W * 11 / 10);
  assert_eq!((s.exact, s.estimate), (200.0, 190.0));
  // Just before 0.9 W leaves the window (e → 0.9): the estimate has decayed prev to
  // ~10 %, the exact log still holds all 200 → −90 requests, −45 % of the exact count.
  let s = traffic.sample(W * 19 / 10 - 1);
  assert_eq!(s.exact, 200.0);
  assert!((s.error() + 90.0).abs() < 1e-3, "{s:?}");
  assert!((s.error() / s.exact + 0.45).abs() < 1e-5);
  // Once the first batch has left (e ≥ 0.9): the estimate still counts ~10 of it → +10.
  let s = traffic.sample(W * 19 / 10);
  assert_eq!(s.exact, 100.0);
  assert!((s.error() - 10.0).abs() < 1e-9, "{s:?}");
  // And the worst over the whole span is that −90.
  let worst = traffic
    .samples(W * 11 / 10, 2 * W, 90_000)
    .iter()
    .map(Sample::error)
    .fold(f64::INFINITY, f64::min);
  assert!((-90.0..-89.99).contains(&worst), "worst {worst}");
}

#[test]
fn stats_are_nearest_rank() {
  let values: Vec<f64> = (1..=100).map(f64::from).collect();
  let s = stats(&values).unwrap();
  assert_eq!((s.min, s.p50, s.p99, s.max), (1.0, 50.0, 99.0, 100.0));
  assert_eq!(s.mean_abs, 50.5);
  assert_eq!(stats(&[]), None);
}

proptest! {
  #![proptest_config(ProptestConfig::with_cases(300))]

  /// Any traffic, any instant: the bound holds and the estimate is never negative.
  #[test]
  fn the_bound_holds_for_any_traffic(
    times in prop::collection::vec(0i64..4 * W, 0..400),
    probes in prop::collection::vec(0i64..4 * W, 1..50),
  ) {
    let traffic = Traffic::new("random", times, W);
    for now in probes {
      let s = traffic.sample(now);
      prop_assert!(s.estimate >= 0.0);
      let (lo, hi) = (-s.prev * s.elapsed_share, s.prev * (1.0 - s.elapsed_share));
      prop_assert!(s.error() >= lo - EPS && s.error() <= hi + EPS, "{:?}", s);
    }
  }
}
