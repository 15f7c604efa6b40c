//! docs/contract.md §9: `computeBurnRate`, `computeBurnRateFromWindow`.

use super::args::Arg;
use super::errors::{call, or_throw};
use crate::core::burn_rate::{compute_burn_rate, compute_burn_rate_from_window, BurnRate};
use crate::error::Result;
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

pub(crate) fn now_ms() -> i64 {
  std::time::SystemTime::now()
    .duration_since(std::time::UNIX_EPOCH)
    .map_or(0, |d| d.as_millis() as i64)
}

fn read_history(arg: &Arg) -> Result<Vec<(f64, f64)>> {
  arg
    .elements()?
    .iter()
    .map(|sample| {
      Ok((
        sample.field("ts")?.number()?,
        sample.field("consumed")?.number()?,
      ))
    })
    .collect()
}

fn read_remaining(value: Option<Unknown>) -> Result<Option<f64>> {
  match value {
    Some(value) => Arg::new(value, "remaining")?.opt_number(),
    None => Ok(None),
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
  remaining: Option<Unknown>,
) -> napi::Result<BurnRateJs> {
  let result = Arg::new(history, "history")
    .and_then(|arg| read_history(&arg))
    .and_then(|history| Ok(compute_burn_rate(&history, read_remaining(remaining)?)));
  or_throw(&env, result).map(BurnRateJs::from)
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
  remaining: Option<Unknown>,
) -> napi::Result<BurnRateJs> {
  call(&env, || {
    let consumed_total = Arg::new(consumed_total, "consumedTotal")?.number()?;
    let window_ms = Arg::new(window_ms, "windowMs")?.number()?;
    if !(window_ms.is_finite() && window_ms >= 1.0) {
      return Err(crate::error::QuotaError::range_error(
        "windowMs",
        format!("must be a finite number >= 1, got {window_ms}"),
      ));
    }
    let remaining = read_remaining(remaining)?;
    Ok(compute_burn_rate_from_window(
      consumed_total,
      window_ms as i64,
      now_ms(),
      remaining,
    ))
  })
  .map(BurnRateJs::from)
}
