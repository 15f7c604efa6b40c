//! Burn rate of docs/contract.md §9: how fast a pool consumes, and when it would run out.

use crate::core::dimensions::elapsed_in_bucket;

/// The smoothing factor of the exponential moving average over per-second rates.
pub const EMA_ALPHA: f64 = 0.3;

/// `{ tokensPerSecond, timeToExhaustionMs }`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurnRate {
  /// Never negative, never NaN.
  pub tokens_per_second: f64,
  /// `remaining / rate × 1000`; `None` (JS `null`) when the rate is 0, `remaining` is
  /// absent or negative, or the result is not a finite number.
  pub time_to_exhaustion_ms: Option<f64>,
}

impl BurnRate {
  /// `{ tokensPerSecond: 0, timeToExhaustionMs: null }`.
  pub const ZERO: BurnRate = BurnRate {
    tokens_per_second: 0.0,
    time_to_exhaustion_ms: None,
  };

  fn new(rate: f64, remaining: Option<f64>) -> Self {
    // `rate > 0` is false for NaN, so NaN reads as 0 too.
    let rate = if rate > 0.0 { rate } else { 0.0 };
    let time_to_exhaustion_ms = match remaining {
      Some(remaining) if rate > 0.0 && remaining >= 0.0 => {
        Some(remaining / rate * 1000.0).filter(|ms| ms.is_finite())
      }
      _ => None,
    };
    BurnRate {
      tokens_per_second: rate,
      time_to_exhaustion_ms,
    }
  }
}

/// `computeBurnRate(history, remaining?)`: an EMA (α = [`EMA_ALPHA`]) of the per-second
/// rates between consecutive usable samples `(ts ms, consumed)`, the first rate seeding it.
/// A sample is usable when both numbers are finite and its `ts` is greater than the last
/// usable sample's (so out-of-order and duplicate timestamps are skipped). Fewer than two
/// usable samples → [`BurnRate::ZERO`]. A negative final EMA clamps to 0.
pub fn compute_burn_rate(history: &[(f64, f64)], remaining: Option<f64>) -> BurnRate {
  let mut last: Option<(f64, f64)> = None;
  let mut ema: Option<f64> = None;
  for &(ts, consumed) in history {
    if !ts.is_finite() || !consumed.is_finite() {
      continue;
    }
    if let Some((last_ts, last_consumed)) = last {
      if ts <= last_ts {
        continue;
      }
      let rate = (consumed - last_consumed) / ((ts - last_ts) / 1000.0);
      ema = Some(match ema {
        None => rate,
        Some(prev) => EMA_ALPHA * rate + (1.0 - EMA_ALPHA) * prev,
      });
    }
    last = Some((ts, consumed));
  }
  match ema {
    Some(rate) => BurnRate::new(rate, remaining),
    None => BurnRate::ZERO,
  }
}

/// `computeBurnRateFromWindow(consumedTotal, windowMs, remaining?)` with the clock as a
/// parameter: `consumed_total` over the seconds elapsed in the current bucket of a
/// `window_ms` window at `now_ms` (at least 1 ms). A `consumed_total` that is not a
/// positive finite number, or a `window_ms <= 0`, gives [`BurnRate::ZERO`].
pub fn compute_burn_rate_from_window(
  consumed_total: f64,
  window_ms: i64,
  now_ms: i64,
  remaining: Option<f64>,
) -> BurnRate {
  if window_ms <= 0 || !consumed_total.is_finite() || consumed_total <= 0.0 {
    return BurnRate::ZERO;
  }
  let elapsed_ms = elapsed_in_bucket(now_ms, window_ms).max(1);
  BurnRate::new(consumed_total / (elapsed_ms as f64 / 1000.0), remaining)
}

/// A `windowMs` the window rate takes, as whole milliseconds: a finite number ≥ 1.
pub fn window_length_ms(window_ms: f64) -> Option<i64> {
  (window_ms.is_finite() && window_ms >= 1.0).then_some(window_ms as i64)
}

#[cfg(test)]
mod tests {
  use super::*;

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
}
