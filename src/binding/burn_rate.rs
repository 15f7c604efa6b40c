//! docs/contract.md §9: `computeBurnRate`, `computeBurnRateFromWindow`.

use super::args::arg;
use super::errors::call;
use crate::core::burn_rate::BurnRate;
use crate::engine::input;
use napi::bindgen_prelude::{Either, Null, Unknown};
use napi::Env;
use napi_derive::napi;

/// How fast a pool burns its quota.
#[napi(object, object_from_js = false, js_name = "BurnRate")]
pub struct BurnRateJs {
  pub tokens_per_second: f64,
  /// `remaining / rate`, or `null` when the rate is 0 or nothing remains to spend.
  pub time_to_exhaustion_ms: Either<f64, Null>,
}

impl From<BurnRate> for BurnRateJs {
  fn from(rate: BurnRate) -> Self {
    BurnRateJs {
      tokens_per_second: rate.tokens_per_second,
      time_to_exhaustion_ms: match rate.time_to_exhaustion_ms {
        Some(ms) => Either::A(ms),
        None => Either::B(Null),
      },
    }
  }
}

/// The EMA (α = 0.3) of per-second rates over consecutive `{ ts, consumed }` samples,
/// skipping non-increasing timestamps. Fewer than two usable samples → zeros.
#[napi(
  catch_unwind,
  js_name = "computeBurnRate",
  ts_args_type = "history: Array<{ ts: number; consumed: number }>, remaining?: number"
)]
pub fn compute_burn_rate_js(
  env: Env,
  history: Unknown,
  remaining: Unknown,
) -> napi::Result<BurnRateJs> {
  call(&env, || {
    let rate = input::burn_rate(&arg(history, "history")?, &arg(remaining, "remaining")?)?;
    Ok(BurnRateJs::from(rate))
  })
}

/// The rate implied by `consumedTotal` spent since the current bucket of a `windowMs`
/// window began (at least 1 ms); zero input → zeros.
#[napi(
  catch_unwind,
  js_name = "computeBurnRateFromWindow",
  ts_args_type = "consumedTotal: number, windowMs: number, remaining?: number"
)]
pub fn compute_burn_rate_from_window_js(
  env: Env,
  consumed_total: Unknown,
  window_ms: Unknown,
  remaining: Unknown,
) -> napi::Result<BurnRateJs> {
  call(&env, || {
    input::burn_rate_from_window(
      &arg(consumed_total, "consumedTotal")?,
      &arg(window_ms, "windowMs")?,
      &arg(remaining, "remaining")?,
    )
    .map(BurnRateJs::from)
  })
}
