//! docs/contract.md §10: the `quota-share` selection (`compat/quotaShareStrategy`).
//!
//! `selectQuotaShareTarget` itself is `lib/quotaShareStrategy.js`: it takes the host's
//! target objects and must return those very objects and a closure, which are JavaScript
//! idioms. It extracts what the algorithm needs into a `Float64Array` and makes ONE call
//! to `__quotaShareSelect`, which runs the whole selection here and writes the order
//! back as indices. The functions named `__quotaShare*` are that crossing, not API.

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

/// Internal (the crossing of `lib/quotaShareStrategy.js`): the symbol of a name — a
/// connection id, an execution key or a combo name — interned on first sight. Symbols are
/// process-wide and never name another name; the JavaScript side caches them in a `Map`
/// and re-interns when a selection reports one evicted (`QUOTA_SHARE_STALE`).
#[napi(catch_unwind, js_name = "__quotaShareSymbol", skip_typescript)]
pub fn quota_share_symbol(name: String) -> f64 {
  engine().intern(&name) as f64
}

/// Internal (the crossing of `lib/quotaShareStrategy.js`): `QUOTA_SCHEDULER_MAX_IDS`, the
/// bound on the names the scheduler (and each JavaScript cache) keeps.
#[napi(catch_unwind, js_name = "__quotaShareMaxIds", skip_typescript)]
pub fn quota_share_max_ids() -> f64 {
  engine().scheduler_max_ids() as f64
}

/// Written by `__quotaShareSelect` as the first index of the order when a symbol it was
/// given is no longer current: re-intern and retry.
#[napi]
pub const QUOTA_SHARE_STALE: f64 = STALE;

// The two calls of every selection — select and release — are plain N-API callbacks
// (`napi-raw/`) rather than `#[napi]` functions: napi-rs's generated wrapper spends
// ~85 ns more on a call that has arguments (its borrow-scope bookkeeping) and ~100 ns
// turning a string into a `String`: more than the whole selection costs at 2 targets.

/// Internal (the crossing of `lib/quotaShareStrategy.js`):
/// `__quotaShareSelect(combo, modelStr, nowMs, count, buffer)` runs one selection.
///
/// `buffer` (a `Float64Array`) holds, for each of the `count` targets in input order, four
/// numbers: the execution key's symbol, the connection's symbol (or -1 for none), the
/// weight (`NaN` when not a number) and the connection's concurrency cap (`NaN` for none).
/// The order — winner, the rest with room in DRR rank order, at-cap tier, saturated tier
/// — is written as indices into `buffer[4·count .. 5·count]`. The winner's connection
/// (symbol at `buffer[4·order[0] + 1]`) holds an in-flight lease until
/// `__quotaShareRelease`. `combo` is the combo name's symbol; `nowMs` is already checked
/// to be finite.
unsafe extern "C" fn quota_share_select(
  env: sys::napi_env,
  info: sys::napi_callback_info,
) -> sys::napi_value {
  let mut stack = [0u8; 256];
  let Some([combo, model_str, now_ms, count, buffer]) = (unsafe { arguments::<5>(env, info) })
  else {
    return unsafe { throw_internal(env, "__quotaShareSelect: expected 5 arguments") };
  };
  let (Some(combo), Some(model_str), Some(now_ms), Some(count), Some(buffer)) = (unsafe {
    (
      number(env, combo),
      optional_string(env, model_str, &mut stack),
      number(env, now_ms),
      number(env, count),
      float64_array(env, buffer),
    )
  }) else {
    return unsafe { throw_internal(env, "__quotaShareSelect: bad arguments") };
  };
  let count = count as usize;
  let Ok(now_ms) = time_from_f64(now_ms, "nowMs") else {
    return unsafe { throw_internal(env, "__quotaShareSelect: nowMs is not finite") };
  };
  if buffer.len() < count * (SELECT_STRIDE + 1) {
    return unsafe { throw_internal(env, "__quotaShareSelect: buffer too small") };
  }
  let selected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
    state().select_into(combo as Sym, model_str.as_deref(), now_ms, count, buffer)
  }));
  match selected {
    Ok(()) => ptr::null_mut(),
    // Never expected; a panic must not unwind into Node.
    Err(_) => unsafe { throw_internal(env, "__quotaShareSelect: internal error") },
  }
}

/// Internal (the crossing of `lib/quotaShareStrategy.js`):
/// `__quotaShareRelease(connection, nowMs)` releases the in-flight lease a selection at
/// `nowMs` took on the connection with symbol `connection`.
unsafe extern "C" fn quota_share_release(
  env: sys::napi_env,
  info: sys::napi_callback_info,
) -> sys::napi_value {
  let Some([connection, now_ms]) = (unsafe { arguments::<2>(env, info) }) else {
    return unsafe { throw_internal(env, "__quotaShareRelease: expected 2 arguments") };
  };
  let (Some(connection), Some(now_ms)) =
    (unsafe { (number(env, connection), number(env, now_ms)) })
  else {
    return unsafe { throw_internal(env, "__quotaShareRelease: bad arguments") };
  };
  if let Ok(now_ms) = time_from_f64(now_ms, "nowMs") {
    engine().release_lease(connection as Sym, now_ms);
  }
  ptr::null_mut()
}

/// Internal (the crossing of `lib/quotaShareStrategy.js`, called once at load):
/// `{ select, release }`, the raw callbacks `__quotaShareSelect` and
/// `__quotaShareRelease`.
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
