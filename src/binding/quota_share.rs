//! docs/contract.md §10: the `quota-share` selection. `selectQuotaShareTarget` is
//! `lib/quotaShareStrategy.js` (it returns the host's own objects and a closure); it packs
//! the targets into a `Float64Array` and makes one call to `__quotaShareSelect`
//! (docs/scheduler.md#design). The `__quotaShare*` functions are that crossing, not API.

use super::engine;
use crate::core::scheduler::QUOTA_SHARE_STRATEGY as CORE_STRATEGY;
use crate::engine::input::time_from_f64;
use crate::engine::scheduler::{SchedulerPart, Sym, NO_CONNECTION, SELECT_STRIDE};
use napi::{Error, Status};
use napi_derive::napi;
use quota_engine_macros::edge;

/// The strategy's name in a combo's configuration: `"quota-share"`.
#[napi]
pub const QUOTA_SHARE_STRATEGY: &str = CORE_STRATEGY;

/// Per target, a selection reads this many numbers (see `__quotaShareSelect`).
#[napi]
pub const QUOTA_SHARE_SELECT_STRIDE: u32 = SELECT_STRIDE as u32;

/// The stand-in for "no connection" in a selection's targets.
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

/// A `Float64Array` argument, borrowed for the call through napi-rs's own conversion (one
/// N-API call: no reference, no copy, nothing allocated). It is named because `#[napi]`
/// converts a parameter written `&mut T` as a `#[napi]` class, which `[f64]` is not. The
/// slice lives only in the call, where no JavaScript runs.
type Float64Buffer<'call> = &'call mut [f64];

/// `__quotaShareSelect(combo, modelStr, nowMs, count, buffer)`: one selection over the
/// `count` targets packed in `buffer` (docs/scheduler.md#the-selection-buffer), the order
/// written back into it; its length (fewer than `count` when a target repeats the winner's
/// execution key), or -1 when a symbol it was given is no longer current (nothing
/// selected: re-intern and retry).
#[napi(catch_unwind, js_name = "__quotaShareSelect", skip_typescript)]
pub fn quota_share_select(
  combo: f64,
  model_str: Option<String>,
  now_ms: f64,
  count: u32,
  buffer: Float64Buffer<'_>,
) -> napi::Result<i32> {
  let count = count as usize;
  if buffer.len() < count * (SELECT_STRIDE + 1) {
    return Err(Error::new(
      Status::InvalidArg,
      "__quotaShareSelect: the buffer is too small",
    ));
  }
  let now_ms =
    time_from_f64(now_ms, "nowMs").map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
  let (targets, out) = buffer.split_at_mut(count * SELECT_STRIDE);
  let mut state = engine().scheduler();
  let Some(order) = state.select(combo as Sym, model_str.as_deref(), now_ms, targets) else {
    return Ok(-1);
  };
  for (slot, &index) in out.iter_mut().zip(order) {
    *slot = index as f64;
  }
  Ok(order.len() as i32)
}

/// `__quotaShareRelease(connection, nowMs)`: releases the lease a selection at `nowMs` took.
#[napi(catch_unwind, js_name = "__quotaShareRelease", skip_typescript)]
pub fn quota_share_release(connection: f64, now_ms: f64) {
  if let Ok(now_ms) = time_from_f64(now_ms, "nowMs") {
    engine().release_lease(connection as Sym, now_ms);
  }
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
