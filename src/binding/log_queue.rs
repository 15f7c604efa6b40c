//! Log records produced in Rust (opening the database, background sweeps, the hot path's
//! fail-open) wait here until the next hot-path call hands them to the JS logger.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use napi_derive::napi;

/// One record: `{ level, component, msg, detail? }`.
#[napi(object, object_from_js = false)]
#[derive(Clone)]
pub struct LogRecord {
  #[napi(catch_unwind, ts_type = "'warn' | 'info' | 'debug'")]
  pub level: String,
  pub component: String,
  pub msg: String,
  pub detail: Option<String>,
}

static PENDING: AtomicBool = AtomicBool::new(false);
static QUEUE: Mutex<Vec<LogRecord>> = Mutex::new(Vec::new());

pub(crate) fn warn(component: &str, msg: impl Into<String>, detail: Option<String>) {
  let mut queue = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
  if queue.len() < 1000 {
    queue.push(LogRecord {
      level: "warn".into(),
      component: component.into(),
      msg: msg.into(),
      detail,
    });
  }
  PENDING.store(true, Ordering::Release);
}

/// Whether records are waiting.
pub(crate) fn pending() -> bool {
  PENDING.load(Ordering::Acquire)
}

/// The pending records, if any (cheap when there are none).
pub(crate) fn take() -> Option<Vec<LogRecord>> {
  if !PENDING.swap(false, Ordering::AcqRel) {
    return None;
  }
  let records = std::mem::take(&mut *QUEUE.lock().unwrap_or_else(|e| e.into_inner()));
  (!records.is_empty()).then_some(records)
}

/// Hands over the log records produced in Rust since the last call.
#[napi(catch_unwind)]
pub fn take_logs() -> Vec<LogRecord> {
  take().unwrap_or_default()
}
