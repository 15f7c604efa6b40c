//! What the engine tells the host about itself. Log records made in Rust wait in the
//! [`LogQueue`] until the next crossing hands them to the host's logger (docs/contract.md
//! §12): Rust never calls into JavaScript to log.
//!
//! [`Faults`] (docs/contract.md §7, §12): the first failure of an operation warns, later
//! ones are counted, and its next success logs the recovery, which re-arms the warning — a
//! store that is down fails every call alike, and a warning per call would flood the log.
//!
//! [`Metrics`], the counters behind `metrics()`: plain atomics on the hot path, rendered
//! in the Prometheus text format (0.0.4) only when scraped.

use super::relock;
use crate::core::dimensions::named_enum;
use crate::core::enforce::BlockReason;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::Instant;

/// How many records wait at most; past it new records are dropped (a flood would only
/// repeat itself).
pub const CAPACITY: usize = 1000;

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

/// The queue. A record goes to the JS thread it was made on when that thread installed the
/// host (its logger), else to the first thread that did and is still there: a worker
/// without a logger of its own, or a background thread, must not take the host's records
/// to its stderr.
#[derive(Default)]
pub struct LogQueue {
  pending: AtomicBool,
  queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
  records: Vec<(ThreadId, LogRecord)>,
  /// The threads that installed the host, first first.
  hosts: Vec<ThreadId>,
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
    let mut queue = relock(&self.queue);
    if queue.records.len() < CAPACITY {
      let record = LogRecord {
        level,
        component,
        msg: msg.into(),
        fields,
      };
      queue.records.push((std::thread::current().id(), record));
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

  /// Whether records wait (one atomic load), for this thread or another.
  pub fn pending(&self) -> bool {
    self.pending.load(Ordering::Acquire)
  }

  /// `thread` installed the host (`true`) or is gone (`false`, its records go to the first).
  pub fn host_thread(&self, thread: ThreadId, installed: bool) {
    let hosts = &mut relock(&self.queue).hosts;
    if !installed {
      hosts.retain(|&t| t != thread);
    } else if !hosts.contains(&thread) {
      hosts.push(thread);
    }
  }

  /// The records waiting for this thread, if any (cheap when none wait).
  pub fn take(&self) -> Option<Vec<LogRecord>> {
    // A load first: the common case (nothing waits) locks nothing.
    if !self.pending.load(Ordering::Acquire) {
      return None;
    }
    let me = std::thread::current().id();
    let mut queue = relock(&self.queue);
    let Queue { records, hosts } = &mut *queue;
    let owner = |made_on: &ThreadId| {
      if hosts.contains(made_on) {
        *made_on
      } else {
        hosts.first().copied().unwrap_or(me)
      }
    };
    // Records waiting for another thread (its next call) are left as they are.
    if !records.iter().any(|(t, _)| owner(t) == me) {
      return None;
    }
    let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(records)
      .into_iter()
      .partition(|(t, _)| owner(t) == me);
    *records = others;
    self.pending.store(!records.is_empty(), Ordering::Release);
    Some(mine.into_iter().map(|(_, record)| record).collect())
  }
}

named_enum! {
  /// The hot-path operations whose faults are tracked; a flush's store errors count as
  /// recording's.
  pub enum Operation {
    Enforce = "enforce",
    Record = "record",
    Flush = "flush",
    Reserve = "reserve",
  }
}

struct Fault {
  count: u64,
  since: Instant,
  last: Instant,
}

/// The open fault of each operation.
#[derive(Default)]
pub struct Faults {
  open: Mutex<[Option<Fault>; 4]>,
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
    let mut open = relock(&self.open);
    match &mut open[operation as usize] {
      Some(fault) => {
        fault.count += 1;
        fault.last = Instant::now();
      }
      slot @ None => {
        *slot = Some(Fault {
          count: 1,
          since: Instant::now(),
          last: Instant::now(),
        });
        self
          .any_open
          .fetch_or(1 << (operation as usize), Ordering::Release);
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

  /// Whether `operation` last failed less than `window` ago: an attempt that would wait
  /// only to fail again may be skipped.
  pub fn failed_within(&self, operation: Operation, window: std::time::Duration) -> bool {
    if self.any_open.load(Ordering::Acquire) & (1 << (operation as usize)) == 0 {
      return false;
    }
    let open = relock(&self.open);
    open[operation as usize]
      .as_ref()
      .is_some_and(|fault| fault.last.elapsed() < window)
  }

  /// A success of `operation`: closes its fault, logging the recovery.
  pub fn succeeded(&self, logs: &LogQueue, operation: Operation) {
    if self.any_open.load(Ordering::Acquire) & (1 << (operation as usize)) == 0 {
      return;
    }
    let mut open = relock(&self.open);
    self
      .any_open
      .fetch_and(!(1 << (operation as usize)), Ordering::Release);
    if let Some(fault) = open[operation as usize].take() {
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

/// Upper bounds (seconds) of the enforce latency histogram: 10 µs … 1 s. A decision that
/// needs no saturation fetch takes microseconds; one that awaits a host fetcher takes as
/// long as the fetcher.
pub const LATENCY_BOUNDS: [f64; 16] = [
  0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
  0.1, 0.25, 0.5, 1.0,
];

named_enum! {
  /// Why a request was allowed: every dimension passed; allowed with the soft policy's
  /// penalty; no pool, plan or limit applies; a saturation fetch was still missing after
  /// waiting once; the engine failed internally and allowed it.
  pub enum AllowReason {
    Ok = "ok",
    Deprioritized = "deprioritized",
    NotEnforced = "not-enforced",
    SaturationPending = "saturation-pending",
    FailOpen = "fail-open",
  }
}

/// A decision, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
  Allow(AllowReason),
  Block(BlockReason),
}

/// The counters: plain atomics, so counting takes no lock (the hot path counts every call).
#[derive(Default)]
pub struct Metrics {
  allow: [AtomicU64; AllowReason::ALL.len()],
  block: [AtomicU64; BlockReason::ALL.len()],
  latency_counts: [AtomicU64; LATENCY_BOUNDS.len() + 1],
  /// The latencies' sum, in nanoseconds.
  latency_sum_ns: AtomicU64,
  /// Enforce's, then recording's (flushes included).
  store_errors: [AtomicU64; 2],
  fail_open: AtomicU64,
  /// Misses, then hits.
  saturation_lookups: [AtomicU64; 2],
  /// Misses, then hits.
  view_lookups: [AtomicU64; 2],
  view_disconnects: AtomicU64,
  /// Redis URLs whose tracking connection is subscribed.
  view_tracking: AtomicI64,
}

fn add(counter: &AtomicU64) {
  counter.fetch_add(1, Ordering::Relaxed);
}

fn read(counter: &AtomicU64) -> u64 {
  counter.load(Ordering::Relaxed)
}

impl Metrics {
  /// One `enforceQuotaShare` outcome that took `seconds`.
  pub fn decision(&self, decision: Counted, seconds: f64) {
    match decision {
      Counted::Allow(reason) => {
        add(&self.allow[reason as usize]);
        if reason == AllowReason::FailOpen {
          add(&self.fail_open);
        }
      }
      Counted::Block(reason) => add(&self.block[reason as usize]),
    }
    let bucket = LATENCY_BOUNDS
      .iter()
      .position(|bound| seconds <= *bound)
      .unwrap_or(LATENCY_BOUNDS.len());
    add(&self.latency_counts[bucket]);
    let nanos = if seconds.is_finite() && seconds > 0.0 {
      (seconds * 1e9) as u64
    } else {
      0
    };
    self.latency_sum_ns.fetch_add(nanos, Ordering::Relaxed);
  }

  /// An error the store reported to a hot-path operation.
  pub fn store_error(&self, operation: Operation) {
    add(&self.store_errors[(operation != Operation::Enforce) as usize]);
  }

  /// A `getSaturation` lookup answered from the cache (`true`) or fetched.
  pub fn saturation_lookup(&self, hit: bool) {
    add(&self.saturation_lookups[hit as usize]);
  }

  /// A default-mode Redis enforce with the counter view on: decided from the view
  /// (`true`) or by the read script.
  pub fn redis_view(&self, hit: bool) {
    add(&self.view_lookups[hit as usize]);
  }

  /// A tracking connection subscribed (`true`) or lost.
  pub fn redis_view_tracking(&self, up: bool) {
    if up {
      self.view_tracking.fetch_add(1, Ordering::Relaxed);
    } else {
      self.view_tracking.fetch_sub(1, Ordering::Relaxed);
      add(&self.view_disconnects);
    }
  }

  /// The exposition text.
  pub fn render(&self) -> String {
    let mut out = String::with_capacity(4096);
    let name = "quota_engine_decisions_total";
    family(
      &mut out,
      name,
      "counter",
      "enforceQuotaShare decisions by kind and reason.",
    );
    let allowed = AllowReason::ALL
      .map(|r| ("allow", r.as_str()))
      .into_iter()
      .zip(&self.allow);
    let blocked = BlockReason::ALL
      .map(|r| ("block", r.as_str()))
      .into_iter()
      .zip(&self.block);
    for ((kind, reason), count) in allowed.chain(blocked) {
      let _ = writeln!(
        out,
        "{name}{{kind=\"{kind}\",reason=\"{reason}\"}} {}",
        read(count)
      );
    }
    let name = "quota_engine_enforce_duration_seconds";
    let help = "Time from the enforceQuotaShare call to its decision, saturation fetches included.";
    family(&mut out, name, "histogram", help);
    let mut cumulative = 0;
    for (i, count) in self.latency_counts.iter().enumerate() {
      cumulative += read(count);
      let le = LATENCY_BOUNDS
        .get(i)
        .map_or_else(|| "+Inf".to_string(), f64::to_string);
      let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
    }
    let sum = read(&self.latency_sum_ns) as f64 / 1e9;
    let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
    let name = "quota_engine_store_errors_total";
    let help = "Errors reported by the quota store, by hot-path operation.";
    family(&mut out, name, "counter", help);
    for (operation, count) in ["enforce", "record"].iter().zip(&self.store_errors) {
      let _ = writeln!(out, "{name}{{operation=\"{operation}\"}} {}", read(count));
    }
    let count = |counter: &AtomicU64| read(counter) as i64;
    for (name, kind, help, value) in [
      (
        "quota_engine_fail_open_total",
        "counter",
        "Requests allowed because enforcement failed internally.",
        count(&self.fail_open),
      ),
      (
        "quota_engine_saturation_cache_hits_total",
        "counter",
        "getSaturation lookups answered from the 30 s cache.",
        count(&self.saturation_lookups[1]),
      ),
      (
        "quota_engine_saturation_cache_misses_total",
        "counter",
        "getSaturation lookups that called a saturation fetcher (or the header fallback).",
        count(&self.saturation_lookups[0]),
      ),
      (
        "quota_engine_redis_view_hits_total",
        "counter",
        "Redis enforce decisions made from the counter view, with no round trip (docs/redis.md#the-counter-view).",
        count(&self.view_lookups[1]),
      ),
      (
        "quota_engine_redis_view_misses_total",
        "counter",
        "Redis enforce decisions, with the counter view on, that took the read script.",
        count(&self.view_lookups[0]),
      ),
      (
        "quota_engine_redis_view_disconnects_total",
        "counter",
        "Counter-view tracking connections lost (each drops its view).",
        count(&self.view_disconnects),
      ),
      (
        "quota_engine_redis_view_tracking",
        "gauge",
        "Redis URLs whose counter-view tracking connection is subscribed.",
        self.view_tracking.load(Ordering::Relaxed),
      ),
      (
        "quota_engine_record_commits_total",
        "counter",
        "Transactions that committed buffered SQLite records (group commit by time: docs/sqlite.md).",
        crate::store::sqlite::record_commits() as i64,
      ),
    ] {
      family(&mut out, name, kind, help);
      let _ = writeln!(out, "{name} {value}");
    }
    out
  }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
  let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

// The queue, the faults and the metrics have their cases in tests/telemetry.rs.
