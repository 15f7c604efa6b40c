//! The hot path's fault log (docs/contract.md §7, §12): the first failure of an operation
//! warns, the ones after it are counted, and its next success logs, at info, that it
//! recovered and how many calls failed open meanwhile — which re-arms the warning.
//!
//! One warning per fault, not one per call: a store that is down (locked past the busy
//! timeout, its disk full, its Redis unreachable) fails every call the same way, and a
//! warning per request would flood the host's log at request rate.

use super::logs::{LogQueue, LogValue};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

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
