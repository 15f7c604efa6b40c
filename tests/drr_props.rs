//! Property tests of the DRR scheduler (docs/contract.md §10, step 4): over `n` selections with
//! weights `wᵢ` and no saturation or load, how far each target's count strays from its
//! share `n · wᵢ / Σw`.
//!
//! What holds for the contract's rule (credit `w / Σw`, the largest deficit wins and pays
//! 1), with `deficit = share − count`:
//! - No target is ever a whole selection ahead of its share: `count − share < 1`. (The
//!   winner's deficit after the credit is at least the average, `1/k > 0`, so after paying 1
//!   it stays above −1; the others only gain.)
//! - The deficits sum to 0 and each is above −1, so none reaches `k − 1`: with two targets
//!   each count is within ±1 of its share.
//! - With more targets a count can fall *more* than one behind its share: the rule is the
//!   greedy "largest deficit first", not an apportionment that bounds the lag by 1. Found by
//!   this test (see `more_targets_can_lag_by_more_than_one`): with 11 targets, one was
//!   chosen 41 times against a share of 42.07. Sampling random weights, the largest lag
//!   seen grows slowly with `k` (about 0.82 at 3 targets, 1.03 at 4, 1.3 at 12).

use omniroute_quota_engine::core::scheduler::drr::{effective_weight, Drr};
use omniroute_quota_engine::core::scheduler::select::{Scheduler, Target};
use proptest::prelude::*;

const CASES: u32 = 1000;

/// Mostly valid weights of varied sizes; sometimes one the round credits as 1.
fn weight() -> impl Strategy<Value = f64> {
  prop_oneof![
    8 => 0.01..100.0f64,
    4 => (1..=10u32).prop_map(f64::from),
    1 => prop_oneof![Just(0.0), Just(-2.0), Just(f64::NAN), Just(f64::INFINITY)],
  ]
}

/// The proven bounds: `count − share < 1` for every target, `share − count < k − 1`, and
/// with two targets `|count − share| < 1`.
fn assert_fair(counts: &[u64], weights: &[f64], n: u64) -> Result<(), TestCaseError> {
  let total: f64 = weights.iter().map(|&w| effective_weight(w)).sum();
  let k = weights.len() as f64;
  // Room for the rounding of n credits of w / Σw.
  let slack = 1e-9 * n as f64;
  for (i, (&count, &w)) in counts.iter().zip(weights).enumerate() {
    let share = n as f64 * effective_weight(w) / total;
    let ahead = count as f64 - share;
    prop_assert!(
      ahead < 1.0 + slack,
      "target {i}: chosen {count} times, a whole selection over its share {share} (weights {weights:?})"
    );
    let behind_bound = if weights.len() <= 2 { 1.0 } else { k - 1.0 };
    prop_assert!(
      -ahead < behind_bound + slack,
      "target {i}: chosen {count} times, share {share}: lag over {behind_bound} (weights {weights:?})"
    );
  }
  prop_assert_eq!(counts.iter().sum::<u64>(), n);
  Ok(())
}

/// Two targets: each count within ±1 of its share (the brief's property, which holds here).
fn assert_within_one(counts: &[u64], weights: &[f64], n: u64) -> Result<(), TestCaseError> {
  let total: f64 = weights.iter().map(|&w| effective_weight(w)).sum();
  for (&count, &w) in counts.iter().zip(weights) {
    let share = n as f64 * effective_weight(w) / total;
    prop_assert!((count as f64 - share).abs() <= 1.0 + 1e-9 * n as f64);
  }
  Ok(())
}

fn run_rounds(weights: &[f64], n: u64) -> Vec<u64> {
  let keys: Vec<usize> = (0..weights.len()).collect();
  let mut drr: Drr<&str, usize> = Drr::default();
  let mut counts = vec![0u64; weights.len()];
  for _ in 0..n {
    counts[drr.round(&"combo", &keys, weights).unwrap()] += 1;
  }
  counts
}

#[test]
fn more_targets_can_lag_by_more_than_one() {
  // The case proptest found: the contract's DRR lets target 4 fall 1.07 selections behind.
  let weights = [
    0.0,
    0.0,
    28.613881906531304,
    0.0,
    85.05722015756592,
    26.601362884094147,
    11.970360640075555,
    10.0,
    8.0,
    24.491915082384672,
    69.14495869235441,
  ];
  let counts = run_rounds(&weights, 132);
  let total: f64 = weights.iter().map(|&w| effective_weight(w)).sum();
  let share = 132.0 * weights[4] / total;
  assert_eq!(counts[4], 41);
  assert!(share - 41.0 > 1.0 && share - 41.0 < 1.1, "{share}");
}

proptest! {
  #![proptest_config(ProptestConfig::with_cases(CASES))]

  /// The DRR round alone.
  #[test]
  fn each_target_stays_within_the_proven_bounds(
    weights in prop::collection::vec(weight(), 1..12),
    n in 1..600u64,
  ) {
    assert_fair(&run_rounds(&weights, n), &weights, n)?;
  }

  /// Two targets: within ±1 of the share.
  #[test]
  fn two_targets_get_their_weighted_share_within_one(
    weights in prop::collection::vec(weight(), 2..=2),
    n in 1..2000u64,
  ) {
    assert_within_one(&run_rounds(&weights, n), &weights, n)?;
  }

  /// The whole selection, each lease released before the next selection (no load), on
  /// targets with connections, so P2C always sees a tie and keeps the DRR winner.
  #[test]
  fn selections_without_load_follow_the_weights(
    weights in prop::collection::vec(weight(), 1..12),
    n in 1..300u64,
    start in 0..1_000_000_000i64,
  ) {
    let targets: Vec<Target<String>> = weights
      .iter()
      .enumerate()
      .map(|(i, &weight)| Target {
        execution_key: format!("exec-{i}"),
        connection: Some(format!("conn-{i}")),
        weight,
        max_concurrent: 1.0,
      })
      .collect();
    let mut scheduler = Scheduler::default();
    let mut order = Vec::new();
    let mut counts = vec![0u64; weights.len()];
    let combo = "combo".to_string();
    for step in 0..n {
      let now = start + step as i64;
      scheduler.select(&targets, &combo, Some("provider/model"), now, &mut order);
      prop_assert_eq!(order.len(), targets.len());
      let winner = order[0];
      counts[winner] += 1;
      let connection = targets[winner].connection.as_ref().unwrap();
      prop_assert_eq!(scheduler.inflight.get(connection, now), 1);
      scheduler.inflight.decrement(connection, now);
      prop_assert!(scheduler.inflight.is_empty());
    }
    assert_fair(&counts, &weights, n)?;
  }

  /// The order is always a permutation of the targets, whatever the state.
  #[test]
  fn the_order_is_a_permutation(
    weights in prop::collection::vec(weight(), 0..12),
    saturated in prop::collection::vec(any::<bool>(), 12),
    inflight in prop::collection::vec(0..3u32, 12),
    caps in prop::collection::vec(prop_oneof![Just(f64::NAN), (1..3u32).prop_map(f64::from)], 12),
  ) {
    let now = 1_000_000;
    let mut scheduler = Scheduler::default();
    let targets: Vec<Target<String>> = weights
      .iter()
      .enumerate()
      .map(|(i, &weight)| Target {
        execution_key: format!("exec-{i}"),
        connection: Some(format!("conn-{i}")),
        weight,
        max_concurrent: caps[i],
      })
      .collect();
    for (i, target) in targets.iter().enumerate() {
      let connection = target.connection.as_ref().unwrap();
      if saturated[i] {
        scheduler.buckets.record_usage(connection, "5h", 100.0, None, now);
      }
      for _ in 0..inflight[i] {
        scheduler.inflight.increment(connection, 60_000, now);
      }
    }
    let mut order = Vec::new();
    scheduler.select(&targets, &"combo".to_string(), None, now, &mut order);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    prop_assert_eq!(sorted, (0..targets.len()).collect::<Vec<_>>());
  }
}
