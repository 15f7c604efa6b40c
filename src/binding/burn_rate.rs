//! docs/contract.md §9: `computeBurnRate`, `computeBurnRateFromWindow`.
//!
//! Two ways in, as for `decideFairShare`: `lib/burnRate.js` packs well-formed input into
//! one `Float64Array` and computes it with one plain N-API call (`fromHistory`,
//! `fromWindow`); anything else comes to the checked entries below, which name the
//! offending field. Both compute with the same `core::burn_rate`.

use super::raw_call::{crossing_object, on_buffer, packed_buffer, PackedBuffer};
use crate::core::burn_rate::{
  packed_from_window, packed_history, BurnRate, PACKED_HEADER, PACKED_MAX_SAMPLES,
};
use crate::engine::input;
use napi::bindgen_prelude::{Either, Null, Object};
use napi::{sys, Env};
use napi_derive::napi;
use quota_engine_macros::{edge, FromCore};

/// How fast a pool burns its quota.
#[napi(object, object_from_js = false, js_name = "BurnRate")]
#[derive(FromCore)]
#[from_core(BurnRate)]
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

// ---- the packed crossing ---------------------------------------------------------------

thread_local! {
  /// This JS thread's packing buffer (the `buffer` of `__burnRateCrossing()`).
  static BUFFER: PackedBuffer = const { PackedBuffer::new(None) };
}

unsafe extern "C" fn from_history(
  env: sys::napi_env,
  _: sys::napi_callback_info,
) -> sys::napi_value {
  unsafe { on_buffer(env, &BUFFER, "__burnRateFromHistory", packed_history) }
}

unsafe extern "C" fn from_window(
  env: sys::napi_env,
  _: sys::napi_callback_info,
) -> sys::napi_value {
  let now = input::now_ms();
  let compute = |buffer: &mut [f64]| packed_from_window(buffer, now);
  unsafe { on_buffer(env, &BUFFER, "__burnRateFromWindow", compute) }
}

/// Internal (the crossing of `lib/burnRate.js`, called once per JS thread at load):
/// `{ buffer, fromHistory, fromWindow, header, maxSamples }` — `buffer` this thread's
/// packing buffer (`header + 2 × maxSamples` elements), the other two its raw callbacks.
#[napi(catch_unwind, js_name = "__burnRateCrossing", skip_typescript)]
pub fn burn_rate_crossing(env: &Env) -> napi::Result<Object<'_>> {
  let buffer = packed_buffer(env, PACKED_HEADER + 2 * PACKED_MAX_SAMPLES, &BUFFER)?;
  let mut crossing = crossing_object(
    env,
    &[
      (c"fromHistory", c"__burnRateFromHistory", from_history),
      (c"fromWindow", c"__burnRateFromWindow", from_window),
    ],
  )?;
  crossing.set("buffer", buffer)?;
  crossing.set("header", PACKED_HEADER as u32)?;
  crossing.set("maxSamples", PACKED_MAX_SAMPLES as u32)?;
  Ok(crossing)
}
