//! docs/contract.md §10: account buckets — which usage windows of a connection are saturated
//! (`compat/accountBuckets`).

use super::engine;
use crate::engine::input;
use crate::engine::scheduler::SchedulerPart;
use napi_derive::napi;
use quota_engine_macros::edge;

/// A window is saturated at or above this used percentage: 100.
#[napi]
pub const SATURATION_THRESHOLD_PCT: u32 = 100;

/// Records a usage reading of one window (`"5h"`, `"7d"` or `"7d:<model>"`) of a
/// connection at `nowMs` (default `Date.now()`). A reset already past (`resetAt <=
/// nowMs`), or a `usedPct` below `SATURATION_THRESHOLD_PCT` or not a finite number,
/// clears the entry; otherwise the window is saturated until `resetAt` (`null`: until a
/// later reading clears it). An empty connection id or window key stores nothing.
///
/// Throws a `TypeError` (`code: "ERR_QUOTA_INVALID_ARG"`) for a non-string id, window key
/// or `resetAt`, and a `RangeError` for a `resetAt` that is not an ISO-8601 timestamp or a
/// non-finite `nowMs`.
#[edge(js_name = "recordUsage")]
pub fn record_usage(
  #[ts = "string"] connection_id: input::connection_id,
  window_key: string,
  #[ts = "number"] used_pct: input::number_or_nan,
  #[ts = "string | null"] reset_at: input::reset_at,
  #[ts = "?number"] now_ms: input::time,
) {
  engine().record_usage(
    connection_id.as_deref(),
    &window_key,
    used_pct,
    reset_at,
    now_ms,
  );
  Ok(())
}

/// Whether `windowKey` of `connectionId` is saturated at `nowMs` (default `Date.now()`).
/// The reset is lazy: the first look at or after `resetAt` removes the entry and reads
/// `false`. A missing entry reads `false`.
#[edge(js_name = "isBucketSaturated")]
pub fn is_bucket_saturated(
  #[ts = "string"] connection_id: input::connection_id,
  window_key: string,
  #[ts = "?number"] now_ms: input::time,
) -> bool {
  Ok(engine().is_bucket_saturated(connection_id.as_deref(), &window_key, now_ms))
}

/// Applies a usage reading of a connection, as the host's usage fetchers return it
/// (`{ quotas: { [name]: { used, total, remaining, remainingPercentage?, resetAt,
/// unlimited? } } }`), at `nowMs` (default `Date.now()`). Quota names map to windows:
/// `"session (5h)"` → `5h`, `"weekly (7d)"` → `7d`, `"weekly <m> (7d)"` → `7d:<m>`; other
/// names are ignored. Each mapped quota is recorded as by `recordUsage`, with its used
/// percentage taken, in order of preference, as 0 when `unlimited: true`, `100 −
/// remainingPercentage`, `used / total × 100`, or `(total − remaining) / total × 100` (both
/// only with `total > 0`). Malformed entries (not an object, no usable numbers, a `resetAt`
/// that is not an ISO-8601 string) are skipped. A `null`/`undefined` reading or `quotas`,
/// or an empty connection id, changes nothing.
///
/// Throws a `TypeError` (`code: "ERR_QUOTA_INVALID_ARG"`) when `usageResult` or
/// `usageResult.quotas` is neither an object nor `null`/`undefined`.
#[edge(js_name = "updateAccountBuckets")]
pub fn update_account_buckets(
  #[ts = "string"] connection_id: input::connection_id,
  #[ts = "{ quotas?: Record<string, AccountQuota> | null } | null | undefined"] usage_result: keep,
  #[ts = "?number"] now_ms: input::time,
) {
  // No reading (`null`/`undefined` usage or quotas) changes nothing, not even the names.
  if let Some(readings) = input::quota_readings(usage_result)? {
    engine().update_account_buckets(connection_id.as_deref(), &readings, now_ms);
  }
  Ok(())
}

/// Tests only: forgets every account bucket.
#[napi(catch_unwind, js_name = "_clearBucketsForTest")]
pub fn clear_buckets_for_test() {
  engine().clear_scheduler_for_tests(SchedulerPart::Buckets);
}

/// Tests only: how many (connection, window) entries are stored.
#[napi(catch_unwind, js_name = "_bucketCountForTest")]
pub fn bucket_count_for_test() -> u32 {
  engine().scheduler_len_for_tests(SchedulerPart::Buckets)
}
