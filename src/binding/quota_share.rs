//! docs/contract.md §10: the `quota-share` selection. `selectQuotaShareTarget` is
//! `lib/quotaShareStrategy.js` (it returns the host's own objects and a closure); it packs
//! the targets into a `Float64Array` and makes one call to `__quotaShareSelect`
//! (docs/scheduler.md#design). The `__quotaShare*` functions are that crossing, not API.

use super::engine;
use super::errors::throw_internal;
use crate::core::scheduler::QUOTA_SHARE_STRATEGY as CORE_STRATEGY;
use crate::engine::input::time_from_f64;
use crate::engine::scheduler::{
  SchedulerPart, SchedulerState, Sym, NO_CONNECTION, SELECT_STRIDE, STALE,
};
use napi::bindgen_prelude::Object;
use napi::{sys, Env};
use napi_derive::napi;
use napi_raw::callback::{arguments, crossing_object};
use napi_raw::read::{float64_array, number, optional_string};
use quota_engine_macros::edge;
use std::ptr;

fn state() -> std::sync::MutexGuard<'static, SchedulerState> {
  engine().scheduler()
}

/// The strategy's name in a combo's configuration: `"quota-share"`.
#[napi]
pub const QUOTA_SHARE_STRATEGY: &str = CORE_STRATEGY;

/// Per target, the selection buffer holds this many numbers (see `__quotaShareSelect`).
#[napi]
pub const QUOTA_SHARE_SELECT_STRIDE: u32 = SELECT_STRIDE as u32;

/// The stand-in for "no connection" in the selection buffer.
#[napi]
pub const QUOTA_SHARE_NO_CONNECTION: f64 = NO_CONNECTION;

/// The symbol of a name (connection id, execution key, combo name), interned on first
/// sight; process-wide, never reused for another name.
#[napi(catch_unwind, js_name = "__quotaShareSymbol", skip_typescript)]
pub fn quota_share_symbol(name: String) -> f64 {
  engine().intern(&name) as f64
}

/// `QUOTA_SCHEDULER_MAX_IDS`, the bound on the names the scheduler (and the glue) keeps.
#[napi(catch_unwind, js_name = "__quotaShareMaxIds", skip_typescript)]
pub fn quota_share_max_ids() -> f64 {
  engine().scheduler_max_ids() as f64
}

/// Written by `__quotaShareSelect` as the first index of the order when a symbol it was
/// given is no longer current: re-intern and retry.
#[napi]
pub const QUOTA_SHARE_STALE: f64 = STALE;

// Select and release are plain N-API callbacks: napi-rs's wrapper costs more than the
// whole selection at 2 targets (docs/scheduler.md#design).

/// `__quotaShareSelect(combo, modelStr, nowMs, count, buffer)`: one selection over the
/// `count` targets packed in `buffer`, the order written back into it
/// (docs/scheduler.md#the-selection-buffer).
unsafe extern "C" fn quota_share_select(
  env: sys::napi_env,
  info: sys::napi_callback_info,
) -> sys::napi_value {
  let mut stack = [0u8; 256];
  // SAFETY: `env` and `info` are the ones N-API passed to this callback (it is handed to
  // JavaScript only by `crossing_object`).
  let Some([combo, model_str, now_ms, count, buffer]) = (unsafe { arguments::<5>(env, info) })
  else {
    // SAFETY: `env` is this callback's live environment.
    return unsafe { throw_internal(env, "__quotaShareSelect: expected 5 arguments") };
  };
  // SAFETY: the handles are this call's arguments on its live `env`; the `buffer` slice is
  // held only while `select_into` (plain Rust) runs, so no JavaScript reads or detaches it.
  let (Some(combo), Some(model_str), Some(now_ms), Some(count), Some(buffer)) = (unsafe {
    (
      number(env, combo),
      optional_string(env, model_str, &mut stack),
      number(env, now_ms),
      number(env, count),
      float64_array(env, buffer),
    )
  }) else {
    // SAFETY: `env` is this callback's live environment.
    return unsafe { throw_internal(env, "__quotaShareSelect: bad arguments") };
  };
  let count = count as usize;
  let Ok(now_ms) = time_from_f64(now_ms, "nowMs") else {
    // SAFETY: `env` is this callback's live environment.
    return unsafe { throw_internal(env, "__quotaShareSelect: nowMs is not finite") };
  };
  if buffer.len() < count * (SELECT_STRIDE + 1) {
    // SAFETY: `env` is this callback's live environment.
    return unsafe { throw_internal(env, "__quotaShareSelect: buffer too small") };
  }
  let selected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
    state().select_into(combo as Sym, model_str.as_deref(), now_ms, count, buffer)
  }));
  match selected {
    Ok(()) => ptr::null_mut(),
    // Never expected; a panic must not unwind into Node.
    // SAFETY: `env` is this callback's live environment.
    Err(_) => unsafe { throw_internal(env, "__quotaShareSelect: internal error") },
  }
}

/// `__quotaShareRelease(connection, nowMs)`: releases the lease a selection at `nowMs` took.
unsafe extern "C" fn quota_share_release(
  env: sys::napi_env,
  info: sys::napi_callback_info,
) -> sys::napi_value {
  // SAFETY: `env` and `info` are the ones N-API passed to this callback (it is handed to
  // JavaScript only by `crossing_object`).
  let Some([connection, now_ms]) = (unsafe { arguments::<2>(env, info) }) else {
    // SAFETY: `env` is this callback's live environment.
    return unsafe { throw_internal(env, "__quotaShareRelease: expected 2 arguments") };
  };
  // SAFETY: the handles are this call's arguments on its live `env`.
  let (Some(connection), Some(now_ms)) =
    (unsafe { (number(env, connection), number(env, now_ms)) })
  else {
    // SAFETY: `env` is this callback's live environment.
    return unsafe { throw_internal(env, "__quotaShareRelease: bad arguments") };
  };
  if let Ok(now_ms) = time_from_f64(now_ms, "nowMs") {
    engine().release_lease(connection as Sym, now_ms);
  }
  ptr::null_mut()
}

/// `{ select, release }`: the raw callbacks, for `lib/quotaShareStrategy.js` at load.
#[napi(catch_unwind, js_name = "__quotaShareCrossing", skip_typescript)]
pub fn quota_share_crossing(env: &Env) -> napi::Result<Object<'_>> {
  crossing_object(
    env,
    &[
      (c"select", c"__quotaShareSelect", quota_share_select),
      (c"release", c"__quotaShareRelease", quota_share_release),
    ],
  )
}

/// Tests only: forgets the DRR state of every combo.
#[napi(catch_unwind, js_name = "_clearDrrStateForTest")]
pub fn clear_drr_state_for_test() {
  engine().clear_scheduler_for_tests(SchedulerPart::Drr);
}

/// Tests only: the DRR deficit of `executionKey` in `comboName` (0 when there is none).
///
/// Throws a `TypeError` (`code: "ERR_QUOTA_INVALID_ARG"`) when an argument is not a string.
#[edge(js_name = "_getDrrDeficitForTest")]
pub fn get_drr_deficit_for_test(combo_name: string, execution_key: string) -> f64 {
  Ok(engine().drr_deficit(&combo_name, &execution_key))
}
