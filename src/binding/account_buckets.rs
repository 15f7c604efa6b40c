//! docs/contract.md §10: account buckets — which usage windows of a connection are saturated
//! (`compat/accountBuckets`).

use super::args::Arg;
use super::errors::call;
use super::scheduler_state::{max_ids, read_connection_id, read_time, state};
use crate::core::iso8601::parse_iso8601_ms;
use crate::core::scheduler::account_buckets::QuotaReading;
use crate::error::{QuotaError, Result};
use napi::bindgen_prelude::Unknown;
use napi::Env;
use napi_derive::napi;

/// A window is saturated at or above this used percentage: 100.
#[napi]
pub const SATURATION_THRESHOLD_PCT: u32 = 100;

/// One quota of a usage reading, as the host's usage fetchers return it. Only what the
/// buckets read is listed; other fields are ignored.
#[napi(object, object_to_js = false)]
#[allow(dead_code)] // Describes the argument in `binding.d.ts`; read through `args.rs`.
pub struct AccountQuota {
  pub used: Option<f64>,
  pub total: Option<f64>,
  pub remaining: Option<f64>,
  /// 0..100: the share of the quota still available.
  pub remaining_percentage: Option<f64>,
  /// An ISO-8601 timestamp; `null` or absent: unknown.
  #[napi(catch_unwind, ts_type = "string | null")]
  pub reset_at: Option<String>,
  /// `true`: never saturated.
  pub unlimited: Option<bool>,
}

/// `resetAt` of `recordUsage`: an ISO-8601 string, or `null`/`undefined` for unknown.
fn read_reset_at(arg: &Arg) -> Result<Option<i64>> {
  match arg.opt_string()? {
    None => Ok(None),
    Some(text) if text.is_empty() => Ok(None),
    Some(text) => parse_iso8601_ms(&text).map(Some).ok_or_else(|| {
      QuotaError::range_error(&arg.path, format!("not an ISO-8601 timestamp: {text:?}"))
    }),
  }
}

fn read_window_key(value: Unknown) -> Result<String> {
  Arg::new(value, "windowKey")?.string()
}

/// Records a usage reading of one window (`"5h"`, `"7d"` or `"7d:<model>"`) of a
/// connection at `nowMs` (default `Date.now()`). A reset already past (`resetAt <=
/// nowMs`), or a `usedPct` below `SATURATION_THRESHOLD_PCT` or not a finite number,
/// clears the entry; otherwise the window is saturated until `resetAt` (`null`: until a
/// later reading clears it). An empty connection id or window key stores nothing.
///
/// Throws a `TypeError` (`code: "ERR_QUOTA_INVALID_ARG"`) for a non-string id, window key
/// or `resetAt`, and a `RangeError` for a `resetAt` that is not an ISO-8601 timestamp or a
/// non-finite `nowMs`.
#[napi(
  catch_unwind,
  js_name = "recordUsage",
  ts_args_type = "connectionId: string, windowKey: string, usedPct: number, resetAt: string | null, nowMs?: number"
)]
pub fn record_usage(
  env: Env,
  connection_id: Unknown,
  window_key: Unknown,
  used_pct: Unknown,
  reset_at: Option<Unknown>,
  now_ms: Option<Unknown>,
) -> napi::Result<()> {
  call(&env, || {
    let id = read_connection_id(connection_id, "connectionId")?;
    let window = read_window_key(window_key)?;
    // Not a number reads as not finite, as `Number.isFinite` does: the entry is cleared.
    let used_pct = Arg::new(used_pct, "usedPct")?.number().unwrap_or(f64::NAN);
    let reset_at = match reset_at {
      Some(value) => read_reset_at(&Arg::new(value, "resetAt")?)?,
      None => None,
    };
    let now_ms = read_time(now_ms, "nowMs")?;
    let Some(id) = id.filter(|_| !window.is_empty()) else {
      return Ok(());
    };
    let max_ids = max_ids();
    let mut state = state();
    let sym = state.intern(&id, max_ids);
    state
      .scheduler
      .buckets
      .record_usage(&sym, &window, used_pct, reset_at, now_ms);
    Ok(())
  })
}

/// Whether `windowKey` of `connectionId` is saturated at `nowMs` (default `Date.now()`).
/// The reset is lazy: the first look at or after `resetAt` removes the entry and reads
/// `false`. A missing entry reads `false`.
#[napi(
  catch_unwind,
  js_name = "isBucketSaturated",
  ts_args_type = "connectionId: string, windowKey: string, nowMs?: number"
)]
pub fn is_bucket_saturated(
  env: Env,
  connection_id: Unknown,
  window_key: Unknown,
  now_ms: Option<Unknown>,
) -> napi::Result<bool> {
  call(&env, || {
    let id = read_connection_id(connection_id, "connectionId")?;
    let window = read_window_key(window_key)?;
    let now_ms = read_time(now_ms, "nowMs")?;
    let mut state = state();
    let Some(sym) = id.and_then(|id| state.symbols.get(&id)) else {
      return Ok(false);
    };
    Ok(state.scheduler.buckets.is_saturated(&sym, &window, now_ms))
  })
}

fn lenient_number(entry: &Arg, name: &str) -> Option<f64> {
  entry.field(name).ok()?.number().ok()
}

/// One quota entry of a usage reading, or `None` when it is malformed: not an object, or
/// a `resetAt` that is neither absent, `null`, `""` nor an ISO-8601 string.
fn read_quota(entry: &Arg) -> Option<QuotaReading> {
  if !entry.is_object() {
    return None;
  }
  let reset_at = entry.field("resetAt").ok()?;
  let reset_at = if reset_at.is_nullish() {
    None
  } else {
    let text = reset_at.string().ok()?;
    if text.is_empty() {
      None
    } else {
      Some(parse_iso8601_ms(&text)?)
    }
  };
  Some(QuotaReading {
    used: lenient_number(entry, "used"),
    total: lenient_number(entry, "total"),
    remaining: lenient_number(entry, "remaining"),
    remaining_percentage: lenient_number(entry, "remainingPercentage"),
    unlimited: entry
      .field("unlimited")
      .and_then(|a| a.boolean())
      .unwrap_or(false),
    reset_at,
  })
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
#[napi(
  catch_unwind,
  js_name = "updateAccountBuckets",
  ts_args_type = "connectionId: string, usageResult: { quotas?: Record<string, AccountQuota> | null } | null | undefined, nowMs?: number"
)]
pub fn update_account_buckets(
  env: Env,
  connection_id: Unknown,
  usage_result: Option<Unknown>,
  now_ms: Option<Unknown>,
) -> napi::Result<()> {
  call(&env, || {
    let id = read_connection_id(connection_id, "connectionId")?;
    let now_ms = read_time(now_ms, "nowMs")?;
    let Some(usage_result) = usage_result else {
      return Ok(());
    };
    let usage = Arg::new(usage_result, "usageResult")?;
    if usage.is_nullish() {
      return Ok(());
    }
    let quotas = usage.field("quotas")?;
    if quotas.is_nullish() {
      return Ok(());
    }
    let names = quotas.keys()?;
    let mut readings = Vec::with_capacity(names.len());
    for name in names {
      let entry = quotas.field(&name)?;
      if let Some(reading) = read_quota(&entry) {
        readings.push((name, reading));
      }
    }
    let Some(id) = id else {
      return Ok(());
    };
    let max_ids = max_ids();
    let mut state = state();
    let sym = state.intern(&id, max_ids);
    state.scheduler.buckets.update(
      &sym,
      readings
        .iter()
        .map(|(name, reading)| (name.as_str(), *reading)),
      now_ms,
    );
    Ok(())
  })
}

/// Tests only: forgets every account bucket.
#[napi(catch_unwind, js_name = "_clearBucketsForTest")]
pub fn clear_buckets_for_test() {
  state().scheduler.buckets.clear();
}

/// Tests only: how many (connection, window) entries are stored.
#[napi(catch_unwind, js_name = "_bucketCountForTest")]
pub fn bucket_count_for_test() -> u32 {
  state().scheduler.buckets.len() as u32
}
