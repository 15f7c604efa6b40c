//! docs/contract.md §10: in-flight leases per connection (`compat/quotaShareInflight`).

use super::engine;
use crate::core::scheduler::inflight::DEFAULT_LEASE_MS as CORE_DEFAULT_LEASE_MS;
use crate::engine::input;
use crate::engine::scheduler::SchedulerPart;
use napi_derive::napi;
use quota_engine_macros::edge;

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
#[edge(js_name = "incrementInflight")]
pub fn increment_inflight(
  #[ts = "string"] connection_id: input::connection_id,
  #[ts = "?number"] lease_ms: input::lease,
  #[ts = "?number"] now_ms: input::time,
) -> u32 {
  Ok(engine().increment_inflight(connection_id.as_deref(), lease_ms, now_ms))
}

/// Releases one request in flight on `connectionId` at `nowMs` (default `Date.now()`):
/// floors at 0, and removes the slot when it reaches 0 or has expired. Unknown or empty
/// ids are ignored.
#[edge(js_name = "decrementInflight")]
pub fn decrement_inflight(
  #[ts = "string"] connection_id: input::connection_id,
  #[ts = "?number"] now_ms: input::time,
) {
  engine().decrement_inflight(connection_id.as_deref(), now_ms);
  Ok(())
}

/// The number of requests in flight on `connectionId` at `nowMs` (default `Date.now()`):
/// 0 when unknown, empty or expired. Reading changes nothing.
#[edge(js_name = "getInflight")]
pub fn get_inflight(
  #[ts = "string"] connection_id: input::connection_id,
  #[ts = "?number"] now_ms: input::time,
) -> u32 {
  Ok(engine().inflight(connection_id.as_deref(), now_ms))
}

/// Tests only: forgets every in-flight slot.
#[napi(catch_unwind, js_name = "_clearInflightForTest")]
pub fn clear_inflight_for_test() {
  engine().clear_scheduler_for_tests(SchedulerPart::Inflight);
}

/// Tests only: how many in-flight slots are stored (expired ones until pruned).
#[napi(catch_unwind, js_name = "_inflightSizeForTest")]
pub fn inflight_size_for_test() -> u32 {
  engine().scheduler_len_for_tests(SchedulerPart::Inflight)
}
