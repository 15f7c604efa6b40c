//! Property tests of the DRR scheduler (CONTRACT §10, step 4): over `n` selections with
//! weights `wᵢ` and no saturation or load, each target is chosen `n · wᵢ / Σw` times,
//! give or take one.

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

fn assert_fair(counts: &[u64], weights: &[f64], n: u64) -> Result<(), TestCaseError> {
  let total: f64 = weights.iter().map(|&w| effective_weight(w)).sum();
  for (i, (&count, &w)) in counts.iter().zip(weights).enumerate() {
    let expected = n as f64 * effective_weight(w) / total;
    // ±1, with room for the rounding of n credits of w / Σw.
    prop_assert!(
      (count as f64 - expected).abs() <= 1.0 + 1e-9 * n as f64,
      "target {i}: chosen {count} times, expected {expected} (weights {weights:?})"
    );
  }
  prop_assert_eq!(counts.iter().sum::<u64>(), n);
  Ok(())
}

proptest! {
  #![proptest_config(ProptestConfig::with_cases(CASES))]

  /// The DRR round alone.
  #[test]
  fn each_target_gets_its_weighted_share_within_one(
    weights in prop::collection::vec(weight(), 1..12),
    n in 1..600u64,
  ) {
    let keys: Vec<usize> = (0..weights.len()).collect();
    let mut drr: Drr<&str, usize> = Drr::default();
    let mut rank = Vec::new();
    let mut counts = vec![0u64; weights.len()];
    for _ in 0..n {
      drr.round(&"combo", &keys, &weights, &mut rank);
      counts[rank[0]] += 1;
    }
    assert_fair(&counts, &weights, n)?;
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
