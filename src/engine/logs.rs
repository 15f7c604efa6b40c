//! Log records produced in Rust (opening the database, background sweeps, the hot path's
//! fail-open, configuration warnings) wait here until the next crossing hands them to the
//! host's logger (docs/contract.md §12): Rust never calls into JavaScript to log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// How many records wait at most; past it new records are dropped (a flood would only
/// repeat itself).
const CAPACITY: usize = 1000;

/// A structured field's value.
#[derive(Debug, Clone, PartialEq)]
pub enum LogValue {
  Text(String),
  Number(f64),
}

impl LogValue {
  /// As JSON, for the host's logger (a non-finite number as `null`).
  pub fn into_json(self) -> serde_json::Value {
    match self {
      LogValue::Text(text) => serde_json::Value::String(text),
      LogValue::Number(n) => {
        serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, serde_json::Value::Number)
      }
    }
  }
}

/// One record: `{ level, component, msg, ...fields }`.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
  /// `warn`, `info` or `debug`.
  pub level: &'static str,
  /// `quota:enforce`, `quota:store`, `quota:config`, …
  pub component: &'static str,
  pub msg: String,
  /// Structured fields, spread into the logged object (`error`, `apiKeyId`, `detail`, …).
  pub fields: Vec<(&'static str, LogValue)>,
}

impl LogRecord {
  /// The text of field `name`, if it has one.
  pub fn text(&self, name: &str) -> Option<&str> {
    self.fields.iter().find_map(|(n, v)| match v {
      LogValue::Text(t) if *n == name => Some(t.as_str()),
      _ => None,
    })
  }
}

/// The queue.
#[derive(Default)]
pub struct LogQueue {
  pending: AtomicBool,
  records: Mutex<Vec<LogRecord>>,
}

impl LogQueue {
  /// Queues a record.
  pub fn push(
    &self,
    level: &'static str,
    component: &'static str,
    msg: impl Into<String>,
    fields: Vec<(&'static str, LogValue)>,
  ) {
    let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
    if records.len() < CAPACITY {
      records.push(LogRecord {
        level,
        component,
        msg: msg.into(),
        fields,
      });
    }
    self.pending.store(true, Ordering::Release);
  }

  /// Queues a warning, with an optional `detail` field.
  pub fn warn(&self, component: &'static str, msg: impl Into<String>, detail: Option<String>) {
    let fields = detail
      .map(|d| ("detail", LogValue::Text(d)))
      .into_iter()
      .collect();
    self.push("warn", component, msg, fields);
  }

  /// Whether records wait (one atomic load).
  pub fn pending(&self) -> bool {
    self.pending.load(Ordering::Acquire)
  }

  /// The waiting records, if any (cheap when there are none).
  pub fn take(&self) -> Option<Vec<LogRecord>> {
    // A load first: the common case (nothing waits) writes nothing.
    if !self.pending.load(Ordering::Acquire) || !self.pending.swap(false, Ordering::AcqRel) {
      return None;
    }
    let records = std::mem::take(&mut *self.records.lock().unwrap_or_else(|e| e.into_inner()));
    (!records.is_empty()).then_some(records)
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn field_values_as_json_keep_text_and_numbers_and_null_a_non_finite_one() {
    let json = |v: LogValue| v.into_json().to_string();
    assert_eq!(json(LogValue::Text("a\"b".into())), r#""a\"b""#);
    assert_eq!(json(LogValue::Number(1.5)), "1.5");
    assert_eq!(json(LogValue::Number(f64::NAN)), "null");
    assert_eq!(json(LogValue::Number(f64::INFINITY)), "null");
  }

  #[test]
  fn records_wait_until_taken() {
    let queue = LogQueue::default();
    assert!(queue.take().is_none());
    queue.warn("quota:store", "a", None);
    queue.push(
      "info",
      "quota:enforce",
      "b",
      vec![("error", LogValue::Text("d".into()))],
    );
    assert!(queue.pending());
    let taken = queue.take().unwrap();
    assert_eq!(taken.len(), 2);
    assert_eq!(taken[1].text("error"), Some("d"));
    assert_eq!(taken[0].fields, []);
    assert!(!queue.pending() && queue.take().is_none());
  }

  #[test]
  fn a_flood_is_bounded() {
    let queue = LogQueue::default();
    for i in 0..(CAPACITY + 10) {
      queue.warn("quota:store", format!("{i}"), None);
    }
    assert_eq!(queue.take().unwrap().len(), CAPACITY);
  }
}
