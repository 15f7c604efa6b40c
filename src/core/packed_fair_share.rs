//! The flat encoding of a fair-share input that `lib/fairShare.js` packs into one
//! `Float64Array` (docs/api.md, "decideFairShare"): numbers only, so a decision crosses
//! from JavaScript with no object and allocates nothing. Decoded here and decided by
//! [`decide_fair_share`]; the layout constants are handed to JavaScript at load.

use crate::core::dimensions::{DimensionKey, Policy, QuotaUnit, QuotaWindow};
use crate::core::fair_share::{
  decide_fair_share, AllocationInput, DecisionKind, DecisionReason, DimensionInput,
  FairShareDecision, FairShareInput, WindowBreakdown,
};
use std::cell::RefCell;

/// The packed input (`lib/fairShare.js` reads these numbers from `__fairShareCrossing()`).
/// Header: dimension count, saturation threshold, weight, whether a cap is set, cap
/// value, cap unit (index into `units`, -1 for none), policy (index into `policies`).
/// After the call, slot 0 holds the outcome (index into `outcomes`) and slot 1 the
/// `retryAfterMs` (NaN for none).
pub const HEADER: usize = 7;
/// Per dimension: unit, window (indices into `units`/`windows`), limit, consumedTotal,
/// globalUsedPercent, this key's consumption, whether buckets are given, then the buckets'
/// nowMs, keyPrev, keyCurr, poolPrev, poolCurr.
pub const STRIDE: usize = 12;
/// More dimensions than this go the checked way.
pub const MAX_DIMENSIONS: usize = 16;

/// `(kind, reason, penalized)` of each outcome code.
pub const OUTCOMES: [(DecisionKind, DecisionReason, bool); 5] = [
  (DecisionKind::Allow, DecisionReason::Ok, false),
  (DecisionKind::Allow, DecisionReason::Ok, true),
  (DecisionKind::Block, DecisionReason::FairShare, false),
  (DecisionKind::Block, DecisionReason::CapAbsolute, false),
  (DecisionKind::Block, DecisionReason::GlobalSaturated, false),
];

fn outcome_code(decision: &FairShareDecision) -> f64 {
  OUTCOMES
    .iter()
    .position(|&(kind, reason, penalized)| {
      kind == decision.kind && reason == decision.reason && penalized == decision.penalized
    })
    .unwrap_or(0) as f64
}

fn index<T: Copy>(all: &[T], code: f64) -> Option<T> {
  (code >= 0.0 && code.fract() == 0.0)
    .then(|| all.get(code as usize).copied())
    .flatten()
}

thread_local! {
  /// The dimensions of the last packed call, kept so a call allocates nothing.
  static DIMENSIONS: RefCell<Vec<DimensionInput>> = const { RefCell::new(Vec::new()) };
}

/// Decides the packed input in `buffer` and writes the outcome back; `None` when the
/// buffer does not hold a valid packing (a bug in `lib/`).
pub fn decide_packed(buffer: &mut [f64]) -> Option<()> {
  let count = *buffer.first()?;
  if !(0.0..=MAX_DIMENSIONS as f64).contains(&count) || count.fract() != 0.0 {
    return None;
  }
  let count = count as usize;
  let packed = buffer.get(..HEADER + count * STRIDE)?;
  let (header, dims) = packed.split_at(HEADER);
  let allocation = AllocationInput {
    weight: header[2],
    cap_value: (header[3] != 0.0).then_some(header[4]),
    cap_unit: if header[5] < 0.0 {
      None
    } else {
      Some(index(&QuotaUnit::ALL, header[5])?)
    },
    policy: index(&Policy::ALL, header[6])?,
  };
  let decision = DIMENSIONS.with(|slot| {
    let mut dimensions = slot.borrow_mut();
    dimensions.clear();
    let mut consumed = [0.0; MAX_DIMENSIONS];
    for (i, d) in dims.chunks_exact(STRIDE).enumerate() {
      consumed[i] = d[5];
      dimensions.push(DimensionInput {
        key: DimensionKey::new(
          String::new(),
          index(&QuotaUnit::ALL, d[0])?,
          index(&QuotaWindow::ALL, d[1])?,
        ),
        limit: d[2],
        consumed_total: d[3],
        global_used_percent: d[4],
        breakdown: (d[6] != 0.0).then_some(WindowBreakdown {
          now_ms: d[7] as i64,
          key_prev: d[8],
          key_curr: d[9],
          pool_prev: d[10],
          pool_curr: d[11],
        }),
      });
    }
    Some(decide_fair_share(&FairShareInput {
      dimensions: &dimensions,
      allocation: &allocation,
      consumed_by_this_key: &consumed[..count],
      saturation_threshold: header[1],
    }))
  })?;
  buffer[0] = outcome_code(&decision);
  buffer[1] = decision.retry_after_ms.map_or(f64::NAN, |ms| ms as f64);
  Some(())
}

#[cfg(test)]
mod tests {
  use super::*;

  fn packed(dims: &[[f64; STRIDE]], header: [f64; HEADER]) -> Vec<f64> {
    let mut buffer = vec![0.0; HEADER + STRIDE * MAX_DIMENSIONS];
    buffer[..HEADER].copy_from_slice(&header);
    buffer[0] = dims.len() as f64;
    for (i, d) in dims.iter().enumerate() {
      buffer[HEADER + i * STRIDE..HEADER + (i + 1) * STRIDE].copy_from_slice(d);
    }
    buffer
  }

  const TOKENS: f64 = 2.0; // QuotaUnit::ALL[2]
  const HOURLY: f64 = 1.0; // QuotaWindow::ALL[1]

  #[test]
  fn decodes_to_the_same_decision_as_the_core() {
    assert_eq!(QuotaUnit::ALL[TOKENS as usize], QuotaUnit::Tokens);
    assert_eq!(QuotaWindow::ALL[HOURLY as usize], QuotaWindow::Hourly);
    // Strict mode, hard, at its share: a fair-share block with a retry.
    let dim = [
      TOKENS,
      HOURLY,
      100.0,
      60.0,
      0.9,
      30.0,
      1.0,
      1_800_000.0,
      20.0,
      10.0,
      40.0,
      20.0,
    ];
    let mut buffer = packed(&[dim], [0.0, 0.5, 25.0, 0.0, 0.0, -1.0, 0.0]);
    decide_packed(&mut buffer).unwrap();
    let expected = decide_fair_share(&FairShareInput {
      dimensions: &[DimensionInput {
        key: DimensionKey::new("", QuotaUnit::Tokens, QuotaWindow::Hourly),
        limit: 100.0,
        consumed_total: 60.0,
        global_used_percent: 0.9,
        breakdown: Some(WindowBreakdown {
          now_ms: 1_800_000,
          key_prev: 20.0,
          key_curr: 10.0,
          pool_prev: 40.0,
          pool_curr: 20.0,
        }),
      }],
      allocation: &AllocationInput {
        weight: 25.0,
        cap_value: None,
        cap_unit: None,
        policy: Policy::Hard,
      },
      consumed_by_this_key: &[30.0],
      saturation_threshold: 0.5,
    });
    assert_eq!(expected.reason, DecisionReason::FairShare);
    assert_eq!(buffer[0], outcome_code(&expected));
    assert_eq!(buffer[1], expected.retry_after_ms.unwrap() as f64);
    // A soft key over its share: the penalized allow, no retry.
    let mut buffer = packed(&[dim], [0.0, 0.5, 25.0, 0.0, 0.0, -1.0, 1.0]);
    decide_packed(&mut buffer).unwrap();
    assert_eq!(
      OUTCOMES[buffer[0] as usize],
      (DecisionKind::Allow, DecisionReason::Ok, true)
    );
    assert!(buffer[1].is_nan());
    // A cap in the dimension's unit blocks first.
    let mut buffer = packed(&[dim], [0.0, 0.5, 25.0, 1.0, 30.0, TOKENS, 0.0]);
    decide_packed(&mut buffer).unwrap();
    assert_eq!(OUTCOMES[buffer[0] as usize].1, DecisionReason::CapAbsolute);
  }

  #[test]
  fn a_bad_packing_is_refused_not_guessed() {
    let dim = [
      TOKENS, HOURLY, 100.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    for header in [
      [0.0, 0.5, 25.0, 0.0, 0.0, -1.0, 3.0], // no such policy
      [0.0, 0.5, 25.0, 1.0, 1.0, 4.0, 0.0],  // no such cap unit
      [0.0, 0.5, 25.0, 1.0, 1.0, 0.5, 0.0],  // a fraction
    ] {
      assert_eq!(decide_packed(&mut packed(&[dim], header)), None);
    }
    let mut bad_unit = dim;
    bad_unit[0] = 9.0;
    assert_eq!(
      decide_packed(&mut packed(
        &[bad_unit],
        [0.0, 0.5, 25.0, 0.0, 0.0, -1.0, 0.0]
      )),
      None
    );
    let mut too_many = packed(&[dim], [0.0, 0.5, 25.0, 0.0, 0.0, -1.0, 0.0]);
    too_many[0] = (MAX_DIMENSIONS + 1) as f64;
    assert_eq!(decide_packed(&mut too_many), None);
    assert_eq!(decide_packed(&mut [2.0, 0.5]), None); // shorter than its count says
  }
}
