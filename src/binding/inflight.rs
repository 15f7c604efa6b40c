//! docs/contract.md §10: in-flight leases per connection (`compat/quotaShareInflight`).

use super::args::arg;
use super::engine;
use super::errors::call;
use crate::core::scheduler::inflight::DEFAULT_LEASE_MS as CORE_DEFAULT_LEASE_MS;
use crate::engine::input;
use napi::bindgen_prelude::Unknown;
use napi::Env;
use napi_derive::napi;

/// The lease of an in-flight slot when none is given: 120 000 ms (two minutes). A
/// connection whose releases are lost drops back to 0 once its lease runs out.
#[napi]
pub const DEFAULT_LEASE_MS: u32 = CORE_DEFAULT_LEASE_MS as u32;

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
  lease_ms: Unknown,
  now_ms: Unknown,
) -> napi::Result<u32> {
  call(&env, || {
    let id = input::connection_id(&arg(connection_id, "connectionId")?)?;
    let lease = input::lease(&arg(lease_ms, "leaseMs")?, CORE_DEFAULT_LEASE_MS)?;
    let now = input::time(&arg(now_ms, "nowMs")?)?;
    Ok(engine().increment_inflight(id.as_deref(), lease, now))
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
pub fn decrement_inflight(env: Env, connection_id: Unknown, now_ms: Unknown) -> napi::Result<()> {
  call(&env, || {
    let id = input::connection_id(&arg(connection_id, "connectionId")?)?;
    let now = input::time(&arg(now_ms, "nowMs")?)?;
    engine().decrement_inflight(id.as_deref(), now);
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
pub fn get_inflight(env: Env, connection_id: Unknown, now_ms: Unknown) -> napi::Result<u32> {
  call(&env, || {
    let id = input::connection_id(&arg(connection_id, "connectionId")?)?;
    let now = input::time(&arg(now_ms, "nowMs")?)?;
    Ok(engine().inflight(id.as_deref(), now))
  })
}

/// Tests only: forgets every in-flight slot.
#[napi(catch_unwind, js_name = "_clearInflightForTest")]
pub fn clear_inflight_for_test() {
  engine().scheduler().scheduler.inflight.clear();
}

/// Tests only: how many in-flight slots are stored (expired ones until pruned).
#[napi(catch_unwind, js_name = "_inflightSizeForTest")]
pub fn inflight_size_for_test() -> u32 {
  engine().scheduler().scheduler.inflight.len() as u32
}
