//! docs/contract.md §9: `computeBurnRate`, `computeBurnRateFromWindow`, two ways in as for
//! `decideFairShare` (docs/api.md#the-pure-functions). Both compute with `core::burn_rate`.

use crate::core::burn_rate::{
  packed_from_window, packed_history, BurnRate, PACKED_HEADER, PACKED_MAX_SAMPLES,
};
use crate::engine::input;
use napi::bindgen_prelude::{Either, Null, Object};
use napi::Env;
use napi_derive::napi;
use napi_raw::callback::crossing_object;
use napi_raw::packed::{packed_buffer, PackedBuffer};
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
  /// This JS thread's history buffer (`historyBuffer` of `__burnRateCrossing()`).
  static HISTORY: PackedBuffer = const { PackedBuffer::new() };
  /// This JS thread's window buffer: apart, so that a window computed from inside a
  /// history's getter leaves the history's packing alone.
  static WINDOW: PackedBuffer = const { PackedBuffer::new() };
}

packed_callback!(
  from_history,
  HISTORY,
  "__burnRateFromHistory",
  packed_history
);
packed_callback!(from_window, WINDOW, "__burnRateFromWindow", |buffer| {
  packed_from_window(buffer, input::now_ms())
});

/// `{ historyBuffer, windowBuffer, fromHistory, fromWindow, header, maxSamples }` for
/// `lib/burnRate.js`, once per JS thread (each buffer one element more: the packing count).
#[napi(catch_unwind, js_name = "__burnRateCrossing", skip_typescript)]
pub fn burn_rate_crossing(env: &Env) -> napi::Result<Object<'_>> {
  let history = packed_buffer(env, PACKED_HEADER + 2 * PACKED_MAX_SAMPLES + 1, &HISTORY)?;
  let window = packed_buffer(env, 3, &WINDOW)?;
  let mut crossing = crossing_object(
    env,
    &[
      (c"fromHistory", c"__burnRateFromHistory", from_history),
      (c"fromWindow", c"__burnRateFromWindow", from_window),
    ],
  )?;
  crossing.set("historyBuffer", history)?;
  crossing.set("windowBuffer", window)?;
  crossing.set("header", PACKED_HEADER as u32)?;
  crossing.set("maxSamples", PACKED_MAX_SAMPLES as u32)?;
  Ok(crossing)
}
