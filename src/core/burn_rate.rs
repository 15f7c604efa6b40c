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
