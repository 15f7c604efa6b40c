//! docs/contract.md §9: `computeBurnRate`, `computeBurnRateFromWindow`, one way in each, as
//! for `decideFairShare` (docs/api.md#the-pure-functions): the arguments are read by
//! `engine::input`, which names the bad field, and computed by `core::burn_rate`.

use crate::core::burn_rate::BurnRate;
use crate::engine::input;
use napi::bindgen_prelude::{Either, Null};
use quota_engine_macros::{edge, from_core};

/// How fast a pool burns its quota.
#[from_core(BurnRate, js_name = "BurnRate")]
pub struct BurnRateJs {
  pub tokens_per_second: f64,
  /// `remaining / rate`, or `null` when the rate is 0 or nothing remains to spend.
  pub time_to_exhaustion_ms: Either<f64, Null>,
}

/// The EMA (α = 0.3) of per-second rates over consecutive `{ ts, consumed }` samples,
/// skipping non-increasing timestamps. Fewer than two usable samples → zeros.
#[edge(js_name = "computeBurnRate")]
pub fn compute_burn_rate_js(
  #[ts = "Array<{ ts: number; consumed: number }>"] history: keep,
  #[ts = "?number"] remaining: keep,
) -> BurnRateJs {
  input::burn_rate(history, remaining).map(|rate| BurnRateJs::from(&rate))
}

/// The rate implied by `consumedTotal` spent since the current bucket of a `windowMs`
/// window began (at least 1 ms); zero input → zeros.
#[edge(js_name = "computeBurnRateFromWindow")]
pub fn compute_burn_rate_from_window_js(
  #[ts = "number"] consumed_total: keep,
  #[ts = "number"] window_ms: keep,
  #[ts = "?number"] remaining: keep,
) -> BurnRateJs {
  input::burn_rate_from_window(consumed_total, window_ms, remaining)
    .map(|rate| BurnRateJs::from(&rate))
}
