//! `recordConsumption` by write-behind on Redis (docs/redis.md#write-behind): a record adds
//! its increments to the buffer of its Redis URL (`store/redis/write_buffer.rs`) and
//! answers at once; this file times the flushes — `QUOTA_RECORD_FLUSH_MS` after the first
//! increment, at once at [`FLUSH_AT`] counters, before the reads that must see it, and
//! blocking at `flushQuotaWrites()`, `closeQuotaDb()` and exit — and handles their failures.

use super::config::{AdmissionMode, RECORD_FLUSH_MS};
use super::telemetry::{LogValue, Operation};
use super::{Engine, Step};
use crate::core::dimensions::DimensionKey;
use crate::core::enforce::Buckets;
use crate::error::Result;
use crate::store::redis::write_buffer::WriteBuffer;
use crate::store::redis::{ReadBatch, Retry};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A buffer holding this many counters is flushed at once.
pub const FLUSH_AT: usize = 1000;
/// A failed flush keeps its counters unless the buffer would then hold more than this.
pub const MAX_BUFFERED: usize = 10_000;
/// How long after a failed flush the next one is tried.
pub const RETRY: Duration = Duration::from_secs(1);

/// The buffers, one per Redis URL.
#[derive(Default)]
pub struct RedisWrites {
  buffers: Mutex<HashMap<String, WriteBuffer>>,
  /// Per URL: a flush holds it exclusively from taking its counters to settling them, a
  /// read that adds the buffer holds it shared from sending to adding. So no read ever sees
  /// a flush Redis applied while its counters are still listed as in flight (counted
  /// twice), nor misses one (counted never): reads and flushes wait at most one round trip
  /// for each other.
  gates: Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>,
  /// The skips said, as `"<what> <bucket>"` (`redis_counters_skipped`).
  said_skipped: Mutex<std::collections::HashSet<String>>,
  /// Whether a record was ever buffered: then the glue commits at a signal, as on SQLite.
  used: AtomicBool,
}

impl RedisWrites {
  fn lock(&self) -> MutexGuard<'_, HashMap<String, WriteBuffer>> {
    super::relock(&self.buffers)
  }

  /// The flush/read gate of `url` (see [`RedisWrites::gates`]).
  pub fn gate(&self, url: &str) -> Arc<tokio::sync::RwLock<()>> {
    let mut gates = super::relock(&self.gates);
    if let Some(gate) = gates.get(url) {
      return gate.clone();
    }
    gates.entry(url.to_string()).or_default().clone()
  }

  /// Whether a record was ever buffered for Redis in this process.
  pub fn used(&self) -> bool {
    self.used.load(Ordering::Relaxed)
  }

  /// How many counters wait for a flush or its answer, over every URL.
  pub fn pending(&self) -> usize {
    self.lock().values().map(WriteBuffer::counters).sum()
  }

  /// Whether `url`'s buffer holds anything, waiting or in flight.
  pub fn holds(&self, url: &str) -> bool {
    self.lock().get(url).is_some_and(WriteBuffer::holds)
  }

  /// Adds `url`'s buffered increments to `values`, `batch`'s reply.
  pub fn overlay(&self, url: &str, batch: &ReadBatch, values: &mut [Buckets]) {
    if let Some(buffer) = self.lock().get(url) {
      buffer.overlay(batch, values);
    }
  }
}

impl Engine {
  /// Whether a record on Redis is buffered: `QUOTA_RECORD_FLUSH_MS` above 0, a runtime to
  /// flush on, and not reserve admission (whose script must see every record,
  /// docs/admission.md).
  pub(super) fn redis_write_behind(&self) -> bool {
    self.number(&RECORD_FLUSH_MS) > 0.0
      && self.spawner.get().is_some()
      && self.admission() != AdmissionMode::Reserve
  }

  /// Buffers `recordConsumption`'s writes for `url`; a bad write is an error and nothing
  /// is buffered.
  pub(super) fn buffer_redis_writes(
    &'static self,
    url: &str,
    api_key_id: &str,
    writes: &[(DimensionKey, f64)],
    now_ms: i64,
  ) -> Result<()> {
    crate::store::validate::writes(api_key_id, writes)?;
    // The backend exists (a URL it cannot use fails here, not at the flush).
    self.redis_backend(url)?;
    let (arm, full) = {
      let mut buffers = self.redis_writes.lock();
      let buffer = buffers.entry(url.to_string()).or_default();
      buffer.add(api_key_id, writes, now_ms);
      self.redis_writes.used.store(true, Ordering::Relaxed);
      (
        !std::mem::replace(&mut buffer.armed, true),
        buffer.full(FLUSH_AT),
      )
    };
    if full {
      self.in_background(Step::later(self.flush_redis(url.to_string())));
    }
    if arm {
      self.flush_redis_after(url.to_string(), false);
    }
    Ok(())
  }

  /// Flushes `url`'s buffer `QUOTA_RECORD_FLUSH_MS` from now — [`RETRY`] after a failed
  /// flush — on the I/O runtime. What is left then (records that came meanwhile, or kept
  /// by a failure) arms the next flush.
  fn flush_redis_after(&'static self, url: String, failed: bool) {
    let delay = match failed {
      true => RETRY,
      false => self.flush_age(),
    };
    self.in_background(Step::later(async move {
      tokio::time::sleep(delay).await;
      if let Some(buffer) = self.redis_writes.lock().get_mut(&url) {
        buffer.armed = false;
      }
      let failed = self.flush_redis(url.clone()).await.is_some();
      let mut buffers = self.redis_writes.lock();
      let again = (buffers.get_mut(&url))
        .is_some_and(|b| b.holds() && !std::mem::replace(&mut b.armed, true));
      drop(buffers);
      if again {
        self.flush_redis_after(url, failed);
      }
    }));
  }

  /// Flushes `url`'s buffer now: one script call per pool's worth (one in all off a
  /// cluster). Resolves to the error message of a failed call, or `None`.
  pub async fn flush_redis(&'static self, url: String) -> Option<String> {
    let backend = match self.redis_backend(&url) {
      Ok(backend) => backend,
      Err(err) => return Some(err.to_string()),
    };
    let gate = self.redis_writes.gate(&url);
    let _exclusive = gate.write().await;
    let (taken, writer) = (self.redis_writes.lock().get_mut(&url))
      .map(|buffer| (buffer.take(backend.layout()), buffer.writer.clone()))
      .unwrap_or_default();
    let mut error = None;
    let mut failed_routes = Vec::new();
    for flush in taken {
      // After a failure the route's later flushes wait, to keep its ids rising.
      if failed_routes.contains(&flush.route) {
        continue;
      }
      let call = flush.call(backend.layout(), &writer);
      match backend.run_script(&call, Retry::Write).await {
        Ok(skipped) => {
          if let Some(buffer) = self.redis_writes.lock().get_mut(&url) {
            buffer.written(flush.id);
          }
          self.faults.succeeded(&self.logs, Operation::Flush);
          self.redis_flush_skipped(&call.keys, &skipped);
        }
        Err(err) => {
          let message = err.to_string();
          self.redis_flush_failed(&url, flush.id, &message);
          error = error.or(Some(message));
          failed_routes.push(flush.route);
        }
      }
    }
    error
  }

  /// The counters `flush.lua` skipped (their indices): a key of theirs holds a value of
  /// another type or not a number, which no retry would change. Dropped, said every time.
  fn redis_flush_skipped(&self, keys: &[String], skipped: &[Option<String>]) {
    let buckets: Vec<&str> = (skipped.iter().flatten())
      .filter_map(|i| keys.get(3 * i.parse::<usize>().ok()?).map(String::as_str))
      .collect();
    self.redis_counters_skipped("dropped {} buffered quota counters", &buckets);
  }

  /// Counters a script skipped, named by their buckets (`what`: how many, at `{}`): a key
  /// of theirs holds another type or not a number. Each bucket is said once per `what` (a
  /// bucket is one window of one key, so a key that stays bad is said again each window),
  /// so a bad key in reserve mode is not a warning per request.
  pub(super) fn redis_counters_skipped(&self, what: &str, buckets: &[&str]) {
    if buckets.is_empty() {
      return;
    }
    self.metrics.store_error(Operation::Record);
    let buckets: Vec<&str> = {
      let mut said = super::relock(&self.redis_writes.said_skipped);
      if said.len() >= MAX_BUFFERED {
        said.clear();
      }
      buckets
        .iter()
        .copied()
        .filter(|b| said.insert(format!("{what} {b}")))
        .collect()
    };
    if buckets.is_empty() {
      return;
    }
    let count = buckets.len().to_string();
    let msg = format!(
      "{}: a Redis key of theirs holds another type or not a number",
      what.replacen("{}", &count, 1)
    );
    let fields = vec![
      ("dropped", LogValue::Number(buckets.len() as f64)),
      ("keys", LogValue::Text(buckets.join(" "))),
    ];
    self.logs.push("warn", "quota:enforce", msg, fields);
  }

  /// A failed flush: its counters are kept for the next one (a fault, logged once; at
  /// exit there is none, and the exit handler says what is left) — unless the buffer would
  /// then hold more than [`MAX_BUFFERED`]: dropped, said every time.
  fn redis_flush_failed(&self, url: &str, id: u64, message: &str) {
    self.metrics.store_error(Operation::Record);
    let (kept, count, buffered) = {
      let mut buffers = self.redis_writes.lock();
      let Some(buffer) = buffers.get_mut(url) else {
        return;
      };
      let (kept, count) = buffer.failed(id, MAX_BUFFERED);
      (kept, count, buffer.counters())
    };
    let exiting = self.database.exiting.load(Ordering::Acquire);
    if kept && exiting {
      // Nothing is retried after an exit: the exit handler says what is left.
    } else if kept {
      self.faults.failed(
        &self.logs,
        Operation::Flush,
        "sending buffered quota records to Redis failed; they stay buffered and are retried",
        message,
        vec![("buffered", LogValue::Number(buffered as f64))],
      );
    } else {
      self.logs.push(
        "warn",
        "quota:enforce",
        format!(
          "dropped {count} buffered quota counters: Redis failed and {MAX_BUFFERED} are already buffered"
        ),
        vec![
          ("dropped", LogValue::Number(count as f64)),
          ("error", LogValue::Text(message.to_string())),
        ],
      );
    }
  }

  /// `step` after `url`'s buffer is flushed, when it holds anything (a read that must see
  /// this process's records, or a write that must come after them); both within one
  /// timeout. The flush runs to its end on its own task whatever the step's wait does.
  pub(super) fn after_redis_flush<T: Send + 'static>(
    &'static self,
    url: &str,
    step: Step<Result<T>>,
  ) -> Step<Result<T>> {
    let Some(backend) = (self.redis_writes.holds(url))
      .then(|| self.redis_backend(url).ok())
      .flatten()
    else {
      return step;
    };
    let url = url.to_string();
    Step::later(async move {
      let flush = tokio::spawn(self.flush_redis(url));
      let step = async {
        let _ = flush.await;
        step.resolve().await
      };
      backend.within(step).await
    })
  }

  /// Flushes every Redis buffer, waiting for the answers on this thread (never call it
  /// from the I/O runtime) — and for flushes already out: `flushQuotaWrites()`,
  /// `closeQuotaDb()`, exit. The first error, or `None`.
  pub fn flush_redis_blocking(&'static self) -> Option<String> {
    // Without a runtime nothing was buffered (see `redis_write_behind`).
    self.spawner.get()?;
    let buffers = self.redis_writes.lock();
    let urls: Vec<String> = (buffers.iter().filter(|(_, b)| b.holds()))
      .map(|(url, _)| url.clone())
      .collect();
    drop(buffers);
    let mut error = None;
    for url in urls {
      let wait = self
        .redis_backend(&url)
        .map(|b| b.timeout() * 2 + Duration::from_millis(100))
        .unwrap_or(Duration::from_secs(1));
      let deadline = std::time::Instant::now() + wait;
      // A flush waits for the one already out (the gate), then sends what is left.
      let answer = loop {
        if !self.redis_writes.holds(&url) {
          break None;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
          let waited = wait.as_millis();
          break Some(format!("no answer from Redis within {waited} ms"));
        }
        let (sender, receiver) = std::sync::mpsc::channel();
        let flush = self.flush_redis(url.clone());
        self.in_background(Step::later(async move {
          let _ = sender.send(flush.await);
        }));
        if let Ok(Some(failed)) = receiver.recv_timeout(left) {
          break Some(failed);
        }
      };
      error = error.or(answer);
    }
    error
  }
}
