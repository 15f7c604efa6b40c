//! The combo scheduler's arguments at the edge (docs/contract.md §10); its state is the
//! engine's (`engine/scheduler.rs`).

use super::args::Arg;
use crate::engine::scheduler::SchedulerState;
use crate::error::{QuotaError, Result};
use napi::bindgen_prelude::Unknown;
use std::sync::MutexGuard;

pub(crate) use crate::engine::scheduler::Sym;

/// The engine's scheduler state.
pub(crate) fn state() -> MutexGuard<'static, SchedulerState> {
  super::engine().scheduler()
}

/// `QUOTA_SCHEDULER_MAX_IDS`, read when a new name is interned (never under the state's
/// lock: a bad value is logged).
pub(crate) fn max_ids() -> usize {
  super::engine().number(&crate::engine::config::SCHEDULER_MAX_IDS) as usize
}

/// A time argument in epoch ms: `Date.now()` when absent (`undefined`/`null`), else a
/// finite number, floored to whole milliseconds (which keeps every `>=` against a whole
/// millisecond exactly as JavaScript compares).
pub(crate) fn read_time(value: Option<Unknown>, field: &str) -> Result<i64> {
  let Some(value) = value else {
    return Ok(super::burn_rate::now_ms());
  };
  match Arg::new(value, field)?.opt_number()? {
    None => Ok(super::burn_rate::now_ms()),
    Some(ms) => time_from_f64(ms, field),
  }
}

/// A finite number of epoch ms, floored.
pub(crate) fn time_from_f64(ms: f64, field: &str) -> Result<i64> {
  if ms.is_finite() {
    Ok(ms.floor() as i64)
  } else {
    Err(QuotaError::range_error(
      field,
      format!("must be a finite number of milliseconds, got {ms}"),
    ))
  }
}

/// A connection id: `None` for `undefined`, `null` or `""` (no connection: nothing is
/// stored for it), else the string; any other type is a `TypeError`.
pub(crate) fn read_connection_id(value: Unknown, field: &str) -> Result<Option<String>> {
  Ok(
    Arg::new(value, field)?
      .opt_string()?
      .filter(|id| !id.is_empty()),
  )
}
