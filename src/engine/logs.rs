//! Log records produced in Rust (opening the database, background sweeps, the hot path's
//! fail-open, configuration warnings) wait here until the next crossing hands them to the
//! host's logger (docs/contract.md §12): Rust never calls into JavaScript to log.
//!
//! [`Faults`], the hot path's fault log (docs/contract.md §7, §12): the first failure of an
//! operation warns, the ones after it are counted, and its next success logs, at info,
//! that it recovered and how many calls failed open meanwhile — which re-arms the warning.
//! One warning per fault, not one per call: a store that is down (locked past the busy
//! timeout, its disk full, its Redis unreachable) fails every call the same way, and a
//! warning per request would flood the host's log at request rate.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

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

/// The operations whose faults are tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
  Enforce,
  Record,
  Flush,
}

impl Operation {
  fn index(self) -> usize {
    self as usize
  }

  /// The name used in log messages.
  pub fn as_str(self) -> &'static str {
    match self {
      Operation::Enforce => "enforce",
      Operation::Record => "record",
      Operation::Flush => "flush",
    }
  }
}

struct Fault {
  count: u64,
  since: Instant,
}

/// The open fault of each operation.
#[derive(Default)]
pub struct Faults {
  open: Mutex<[Option<Fault>; 3]>,
  /// One bit per operation with an open fault: a success checks it without the lock.
  any_open: AtomicU8,
}

impl Faults {
  /// A failure of `operation`: warns (through `logs`) when it opens a fault, with
  /// `context` and the error as fields.
  pub fn failed(
    &self,
    logs: &LogQueue,
    operation: Operation,
    msg: &str,
    error: &str,
    mut context: Vec<(&'static str, LogValue)>,
  ) {
    let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
    match &mut open[operation.index()] {
      Some(fault) => fault.count += 1,
      slot @ None => {
        *slot = Some(Fault {
          count: 1,
          since: Instant::now(),
        });
        self
          .any_open
          .fetch_or(1 << operation.index(), Ordering::Release);
        context.push(("error", LogValue::Text(error.to_string())));
        logs.push(
          "warn",
          "quota:enforce",
          format!("{msg} (further failures are counted until it recovers)"),
          context,
        );
      }
    }
  }

  /// A success of `operation`: closes its fault, logging the recovery.
  pub fn succeeded(&self, logs: &LogQueue, operation: Operation) {
    if self.any_open.load(Ordering::Acquire) & (1 << operation.index()) == 0 {
      return;
    }
    let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
    self
      .any_open
      .fetch_and(!(1 << operation.index()), Ordering::Release);
    if let Some(fault) = open[operation.index()].take() {
      logs.push(
        "info",
        "quota:enforce",
        format!("quota {} recovered", operation.as_str()),
        vec![
          ("failedCalls", LogValue::Number(fault.count as f64)),
          (
            "failingForMs",
            LogValue::Number(fault.since.elapsed().as_millis() as f64),
          ),
        ],
      );
    }
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

  #[test]
  fn one_warning_per_fault_then_a_recovery() {
    let logs = LogQueue::default();
    let faults = Faults::default();
    faults.succeeded(&logs, Operation::Record);
    assert!(logs.take().is_none());
    for _ in 0..3 {
      faults.failed(
        &logs,
        Operation::Record,
        "recording failed",
        "locked",
        vec![],
      );
    }
    let warned = logs.take().unwrap();
    assert_eq!(warned.len(), 1);
    assert_eq!(warned[0].level, "warn");
    assert_eq!(warned[0].text("error"), Some("locked"));
    faults.succeeded(&logs, Operation::Record);
    let recovered = logs.take().unwrap();
    assert_eq!(
      recovered[0].fields[0],
      ("failedCalls", LogValue::Number(3.0))
    );
    faults.failed(
      &logs,
      Operation::Record,
      "recording failed",
      "locked",
      vec![],
    );
    assert_eq!(logs.take().unwrap().len(), 1, "re-armed");
  }
}
