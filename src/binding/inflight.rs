//! docs/contract.md §10: in-flight leases per connection (`compat/quotaShareInflight`).

use super::args::Arg;
use super::errors::call;
use super::scheduler_state::{max_ids, read_connection_id, read_time, state};
use crate::core::scheduler::inflight::DEFAULT_LEASE_MS as CORE_DEFAULT_LEASE_MS;
use crate::error::{QuotaError, Result};
use napi::bindgen_prelude::Unknown;
use napi::Env;
use napi_derive::napi;

/// The lease of an in-flight slot when none is given: 120 000 ms (two minutes). A
/// connection whose releases are lost drops back to 0 once its lease runs out.
#[napi]
pub const DEFAULT_LEASE_MS: u32 = CORE_DEFAULT_LEASE_MS as u32;

fn read_lease(value: Option<Unknown>) -> Result<i64> {
  let Some(value) = value else {
    return Ok(CORE_DEFAULT_LEASE_MS);
  };
  match Arg::new(value, "leaseMs")?.opt_number()? {
    None => Ok(CORE_DEFAULT_LEASE_MS),
    Some(ms) if ms.is_finite() && ms >= 0.0 => Ok(ms.floor() as i64),
    Some(ms) => Err(QuotaError::range_error(
      "leaseMs",
      format!("must be a finite number >= 0, got {ms}"),
    )),
  }
}

/// Counts one more request in flight on `connectionId` and returns the new count. An
/// expired slot counts as 0; the slot's expiry becomes `nowMs + leaseMs`; every expired
/// slot (of any connection) is pruned. An empty (or absent) id returns 0 and stores
/// nothing.
///
/// `leaseMs` defaults to `DEFAULT_LEASE_MS`, `nowMs` to `Date.now()`. Throws a
/// `TypeError`/`RangeError` (`code: "ERR_QUOTA_INVALID_ARG"`) naming the argument for a
/// non-string id, a negative or non-finite lease, or a non-finite time.
#[napi(
  catch_unwind,
  js_name = "incrementInflight",
  ts_args_type = "connectionId: string, leaseMs?: number, nowMs?: number"
)]
pub fn increment_inflight(
  env: Env,
  connection_id: Unknown,
  lease_ms: Option<Unknown>,
  now_ms: Option<Unknown>,
) -> napi::Result<u32> {
  call(&env, || {
    let id = read_connection_id(connection_id, "connectionId")?;
    let lease_ms = read_lease(lease_ms)?;
    let now_ms = read_time(now_ms, "nowMs")?;
    let Some(id) = id else {
      return Ok(0);
    };
    let max_ids = max_ids();
    let mut state = state();
    let sym = state.intern(&id, max_ids);
    Ok(state.scheduler.inflight.increment(&sym, lease_ms, now_ms))
  })
}

/// Releases one request in flight on `connectionId` at `nowMs` (default `Date.now()`):
/// floors at 0, and removes the slot when it reaches 0 or has expired. Unknown or empty
/// ids are ignored.
#[napi(
  catch_unwind,
  js_name = "decrementInflight",
  ts_args_type = "connectionId: string, nowMs?: number"
)]
pub fn decrement_inflight(
  env: Env,
  connection_id: Unknown,
  now_ms: Option<Unknown>,
) -> napi::Result<()> {
  call(&env, || {
    let id = read_connection_id(connection_id, "connectionId")?;
    let now_ms = read_time(now_ms, "nowMs")?;
    let mut state = state();
    if let Some(sym) = id.and_then(|id| state.symbols.get(&id)) {
      state.scheduler.inflight.decrement(&sym, now_ms);
    }
    Ok(())
  })
}

/// The number of requests in flight on `connectionId` at `nowMs` (default `Date.now()`):
/// 0 when unknown, empty or expired. Reading changes nothing.
#[napi(
  catch_unwind,
  js_name = "getInflight",
  ts_args_type = "connectionId: string, nowMs?: number"
)]
pub fn get_inflight(
  env: Env,
  connection_id: Unknown,
  now_ms: Option<Unknown>,
) -> napi::Result<u32> {
  call(&env, || {
    let id = read_connection_id(connection_id, "connectionId")?;
    let now_ms = read_time(now_ms, "nowMs")?;
    let state = state();
    Ok(
      id.and_then(|id| state.symbols.get(&id))
        .map_or(0, |sym| state.scheduler.inflight.get(&sym, now_ms)),
    )
  })
}

/// Tests only: forgets every in-flight slot.
#[napi(catch_unwind, js_name = "_clearInflightForTest")]
pub fn clear_inflight_for_test() {
  state().scheduler.inflight.clear();
}

/// Tests only: how many in-flight slots are stored (expired ones until pruned).
#[napi(catch_unwind, js_name = "_inflightSizeForTest")]
pub fn inflight_size_for_test() -> u32 {
  state().scheduler.inflight.len() as u32
}
