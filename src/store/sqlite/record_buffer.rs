//! `recordConsumption`'s writes, buffered and committed together (docs/sqlite.md, "Records
//! are buffered"): [`PendingWrites`] holds them per counter and bucket, every read of a
//! counter or a pool total adds them, and [`SqliteDb::flush_pending`] commits them in
//! transactions of at most [`FLUSH_BATCH`] rows. A flush that fails keeps the buffer: a
//! locked database delays records instead of dropping them.

use super::{SqliteDb, StoreContext};
use crate::core::dimensions::{bucket_index, DimensionKey, PushKey};
use crate::error::Result;
use crate::store::validate::{self, COUNTER_MAX};
use rusqlite::params;
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Transactions that committed buffered records, process-wide (no connection resets it).
static COMMITS: AtomicU64 = AtomicU64::new(0);

/// How many transactions have committed buffered records in this process.
pub fn record_commits() -> u64 {
  COMMITS.load(Ordering::Relaxed)
}

/// Counters committed per flush transaction: a transaction this size holds the write lock
/// for about a millisecond, so another writer never waits longer between two of them.
pub const FLUSH_BATCH: usize = 256;
/// The buffer size that makes a recording call flush at once: a cap on memory and work,
/// well above a batch so records spread over many keys still share a flush.
pub const FLUSH_AT: usize = 4096;
/// After a failed automatic flush, the recording calls wait this long before trying
/// again themselves (the facade's scheduled retry keeps its own pace).
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);
/// How long an automatic flush waits for another connection's write lock: failing costs
/// nothing (the buffer is kept), waiting blocks the caller's thread.
const AUTOMATIC_BUSY_TIMEOUT: Duration = Duration::from_millis(100);
const UPSERT: &str = "
  INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at)
  VALUES (?1, ?2, ?3, min(?4, 1e15), ?5)
  ON CONFLICT (api_key_id, dimension_key, bucket_index) DO UPDATE SET
    consumed = min(max(coalesce(consumed, 0), 0) + excluded.consumed, 1e15),
    updated_at = max(coalesce(updated_at, 0), excluded.updated_at)";

/// One buffered counter: the amount to add to one bucket.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PendingCounter {
  api_key_id: String,
  dimension_key: String,
  bucket: i64,
  delta: f64,
  updated_at: i64,
}

/// `recordConsumption`'s buffered additions (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct PendingWrites {
  /// Keyed by `apiKeyId \0 dimensionKey \0 bucket`.
  counters: HashMap<String, PendingCounter>,
  /// The same amounts summed per `dimensionKey \0 bucket`: the pool totals' share.
  totals: HashMap<String, f64>,
  /// When the oldest buffered amount was added.
  since: Option<Instant>,
  /// When the last automatic flush failed.
  failed_at: Option<Instant>,
  scratch: String,
}

/// `prefix` and `apiKeyId \0 dimensionKey \0 bucket`, built in a reused buffer: a
/// `DimensionKey` is appended without building its string first. (`hot.rs` keeps both
/// kinds of key in one map, told apart by the prefix.)
pub(super) fn counter_key(
  out: &mut String,
  prefix: &str,
  api_key_id: &str,
  dimension_key: &(impl PushKey + ?Sized),
  bucket: i64,
) {
  out.clear();
  out.push_str(prefix);
  out.push_str(api_key_id);
  out.push('\0');
  dimension_key.push_key(out);
  out.push('\0');
  bucket.push_key(out);
}

/// `prefix` and `dimensionKey \0 bucket`, like [`counter_key`].
pub(super) fn totals_key(
  out: &mut String,
  prefix: &str,
  dimension_key: &(impl PushKey + ?Sized),
  bucket: i64,
) {
  out.clear();
  out.push_str(prefix);
  dimension_key.push_key(out);
  out.push('\0');
  bucket.push_key(out);
}

impl PendingWrites {
  pub(crate) fn is_empty(&self) -> bool {
    self.counters.is_empty()
  }

  /// Buffered counters (distinct buckets).
  pub(crate) fn len(&self) -> usize {
    self.counters.len()
  }

  fn add(
    &mut self,
    api_key_id: &str,
    dimension_key: &(impl PushKey + ?Sized),
    bucket: i64,
    delta: f64,
    now_ms: i64,
  ) {
    // Saturating, as the stored counter does: two huge amounts never make an infinite one.
    let mut delta = validate::saturate(delta);
    self.since.get_or_insert_with(Instant::now);
    counter_key(&mut self.scratch, "", api_key_id, dimension_key, bucket);
    match self.counters.get_mut(self.scratch.as_str()) {
      Some(entry) => {
        let before = entry.delta;
        entry.delta = validate::saturate(before + delta);
        // The totals' share grows by what the counter actually grew.
        delta = entry.delta - before;
        entry.updated_at = entry.updated_at.max(now_ms);
      }
      None => {
        self.counters.insert(
          self.scratch.clone(),
          PendingCounter {
            api_key_id: api_key_id.to_string(),
            dimension_key: {
              let mut key = String::new();
              dimension_key.push_key(&mut key);
              key
            },
            bucket,
            delta,
            updated_at: now_ms,
          },
        );
      }
    }
    totals_key(&mut self.scratch, "", dimension_key, bucket);
    match self.totals.get_mut(self.scratch.as_str()) {
      Some(total) => *total += delta,
      None => {
        self.totals.insert(self.scratch.clone(), delta);
      }
    }
  }

  /// Drops every buffered bucket of one key's dimension key (its counter was cleared).
  fn remove_counter(&mut self, api_key_id: &str, dimension_key: &str) {
    let totals = &mut self.totals;
    self.counters.retain(|_, e| {
      let hit = e.api_key_id == api_key_id && e.dimension_key == dimension_key;
      if hit {
        let mut key = String::new();
        totals_key(&mut key, "", e.dimension_key.as_str(), e.bucket);
        if let Some(total) = totals.get_mut(&key) {
          *total -= e.delta;
        }
      }
      !hit
    });
    if self.counters.is_empty() {
      self.totals.clear();
      self.since = None;
    }
  }

  /// Adds `entries` back, `since` their age: the buffer keeps the older of the two.
  fn restore(&mut self, entries: impl IntoIterator<Item = PendingCounter>, since: Option<Instant>) {
    for e in entries {
      self.add(
        &e.api_key_id,
        e.dimension_key.as_str(),
        e.bucket,
        e.delta,
        e.updated_at,
      );
    }
    self.since = self.since.into_iter().chain(since).min();
  }

  /// Adds `other`'s amounts, keeping the older of the two ages.
  pub(crate) fn merge(&mut self, other: PendingWrites) {
    self.restore(other.counters.into_values(), other.since);
  }

  /// `(curr, prev)` buffered for one key's counter.
  fn key_pair(
    &mut self,
    api_key_id: &str,
    dimension_key: &(impl PushKey + ?Sized),
    current: i64,
  ) -> (f64, f64) {
    if self.counters.is_empty() {
      return (0.0, 0.0);
    }
    let mut at = |bucket| {
      counter_key(&mut self.scratch, "", api_key_id, dimension_key, bucket);
      self
        .counters
        .get(self.scratch.as_str())
        .map_or(0.0, |e| e.delta)
    };
    (at(current), at(current - 1))
  }

  /// `(curr, prev)` buffered for a dimension key over every API key.
  fn totals_pair(&mut self, dimension_key: &(impl PushKey + ?Sized), current: i64) -> (f64, f64) {
    if self.totals.is_empty() {
      return (0.0, 0.0);
    }
    let mut at = |bucket| {
      totals_key(&mut self.scratch, "", dimension_key, bucket);
      self
        .totals
        .get(self.scratch.as_str())
        .copied()
        .unwrap_or(0.0)
    };
    (at(current), at(current - 1))
  }

  /// Whether a recording call should flush now: the buffer is full, or older than
  /// `max_age` — unless an automatic flush failed within the last second.
  fn due(&self, max_age: Duration) -> bool {
    !self.backing_off()
      && (self.counters.len() >= FLUSH_AT || self.since.is_some_and(|t| t.elapsed() >= max_age))
  }

  /// An automatic flush failed within the last second: automatic attempts wait.
  fn backing_off(&self) -> bool {
    self
      .failed_at
      .is_some_and(|t| t.elapsed() < RETRY_AFTER_FAILURE)
  }
}

/// Buffered records a close could not commit.
#[derive(Debug, Clone, PartialEq)]
pub struct Dropped {
  /// Counters (distinct buckets) dropped.
  pub counters: usize,
  /// Why the flush failed.
  pub error: String,
}

/// What a recording call did with its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
  /// Nothing to write (no pool, no positive amount).
  Nothing,
  /// Committed (write-through, or the buffer was due and flushed).
  Committed,
  /// Buffered: the caller arranges a flush soon on its own thread's event loop (every
  /// buffering thread does: one that stops turning cannot hold records back).
  Buffered,
  /// Buffered, because the connection's file is no longer the one at the path: the caller
  /// retires the connection, which carries the buffer to the file now at the path.
  FileReplaced,
}

impl SqliteDb {
  /// One key's `(curr, prev)` as committed, plus what is buffered for it: the flush
  /// saturates the sum at `COUNTER_MAX`, so does the read.
  pub(super) fn with_pending_key(
    &self,
    api_key_id: &str,
    dimension_key: &(impl PushKey + ?Sized),
    current: i64,
    (curr, prev): (f64, f64),
  ) -> (f64, f64) {
    let mut buffer = self.buffer.borrow_mut();
    let (pending_curr, pending_prev) = buffer.key_pair(api_key_id, dimension_key, current);
    (
      (curr + pending_curr).min(COUNTER_MAX),
      (prev + pending_prev).min(COUNTER_MAX),
    )
  }

  /// A dimension key's pool totals `(curr, prev)` as committed, plus what is buffered.
  pub(super) fn with_pending_totals(
    &self,
    dimension_key: &(impl PushKey + ?Sized),
    current: i64,
    (curr, prev): (f64, f64),
  ) -> (f64, f64) {
    let (pending_curr, pending_prev) = self.buffer.borrow_mut().totals_pair(dimension_key, current);
    (curr + pending_curr, prev + pending_prev)
  }

  /// `recordConsumption`'s writes for one key: buffered, or committed at once when
  /// `max_age` is zero (write-through), or committed with the whole buffer when it is due.
  /// Validates every write first: a bad one writes nothing. Writes that fail to commit
  /// stay buffered, for the next flush; write-through then returns the error.
  pub fn record_writes(
    &self,
    api_key_id: &str,
    writes: &[(DimensionKey, f64)],
    now_ms: i64,
    max_age: Duration,
  ) -> Result<Recorded> {
    crate::store::validate::writes(api_key_id, writes)?;
    if writes.is_empty() {
      return Ok(Recorded::Nothing);
    }
    let write_through = max_age.is_zero();
    // A record reaches this connection without a file check (`Access::Buffer`): it commits
    // here only while the file is still the one at the path. Otherwise it waits in the
    // buffer for the flush, which carries the buffer to the file now at the path.
    let replaced = || self.file_replaced_now();
    if write_through && self.buffer.borrow().is_empty() && !replaced() {
      if let Err(err) = self.consume_many(api_key_id, writes, now_ms) {
        self.buffer(api_key_id, writes, now_ms);
        return Err(err);
      }
      return Ok(Recorded::Committed);
    }
    self.buffer(api_key_id, writes, now_ms);
    if !(write_through || self.buffer.borrow().due(max_age)) {
      return Ok(Recorded::Buffered);
    }
    if replaced() {
      return Ok(Recorded::FileReplaced);
    }
    if write_through {
      self.flush_pending(false)?;
      return Ok(Recorded::Committed);
    }
    if self.flush_pending(true).is_ok() {
      return Ok(Recorded::Committed);
    }
    Ok(Recorded::Buffered)
  }

  /// One validated amount into the buffer; commits the buffer when it is due and the file
  /// is still the one at the path, looked up now (a failure keeps it buffered, for the
  /// next flush; a replaced file leaves it for the next check to carry).
  pub(super) fn buffer_one(
    &self,
    api_key_id: &str,
    key: &DimensionKey,
    cost: f64,
    now_ms: i64,
    max_age: Duration,
  ) {
    let bucket = bucket_index(now_ms, key.window.ms());
    self
      .buffer
      .borrow_mut()
      .add(api_key_id, key, bucket, cost, now_ms);
    if self.buffer.borrow().due(max_age) && !self.file_replaced_now() {
      let _ = self.flush_pending(true);
    }
  }

  fn buffer(&self, api_key_id: &str, writes: &[(DimensionKey, f64)], now_ms: i64) {
    let pending = &mut *self.buffer.borrow_mut();
    for (key, cost) in writes {
      let bucket = bucket_index(now_ms, key.window.ms());
      pending.add(api_key_id, key, bucket, *cost, now_ms);
    }
  }

  /// How long the event loop's flush timer should wait before committing the buffer:
  /// `None` when nothing is buffered; zero when the oldest buffered amount is `max_age`
  /// old (commit now); while an automatic flush failed within the last second, what is
  /// left of that second (docs/sqlite.md, "Records are buffered").
  pub fn flush_wait(&self, max_age: Duration) -> Option<Duration> {
    let pending = &*self.buffer.borrow();
    let since = pending.since.filter(|_| !pending.is_empty())?;
    if let Some(failed) = pending.failed_at {
      let left = RETRY_AFTER_FAILURE.saturating_sub(failed.elapsed());
      if !left.is_zero() {
        return Some(left);
      }
    }
    Some(max_age.saturating_sub(since.elapsed()))
  }

  /// Buffered counters not yet committed.
  pub fn pending_count(&self) -> usize {
    self.buffer.borrow().len()
  }

  /// Commits the buffered writes, [`FLUSH_BATCH`] counters per transaction; returns how
  /// many counters were committed. A failed transaction's counters, and those after it,
  /// stay buffered. `automatic` (the scheduled flush and the recording calls): a failure
  /// holds back the recording calls' own attempts for a second.
  pub fn flush_pending(&self, automatic: bool) -> Result<usize> {
    let (entries, since): (Vec<PendingCounter>, _) = {
      let pending = &mut *self.buffer.borrow_mut();
      if pending.counters.is_empty() {
        return Ok(0);
      }
      pending.totals.clear();
      let since = pending.since.take();
      (pending.counters.drain().map(|(_, e)| e).collect(), since)
    };
    if automatic {
      self.briefly(|db| db.commit_entries(entries, since, automatic))
    } else {
      self.commit_entries(entries, since, automatic)
    }
  }

  /// `f` with the busy timeout of an automatic flush: failing costs the caller nothing (it
  /// tries again later), waiting blocks every thread that needs the connection.
  pub fn briefly<T>(&self, f: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
    /// Puts the connection's own busy timeout back, even when `f` panics.
    struct Restore<'a>(&'a SqliteDb);
    impl Drop for Restore<'_> {
      fn drop(&mut self) {
        let _ = self.0.conn.busy_timeout(self.0.busy_timeout);
      }
    }
    if self.busy_timeout <= AUTOMATIC_BUSY_TIMEOUT {
      return f(self);
    }
    let _ = self.conn.busy_timeout(AUTOMATIC_BUSY_TIMEOUT);
    let _restore = Restore(self);
    f(self)
  }

  /// `since`: when the oldest of `entries` was buffered, kept if they go back to the
  /// buffer (their age is what the durability bound is about).
  fn commit_entries(
    &self,
    entries: Vec<PendingCounter>,
    since: Option<Instant>,
    automatic: bool,
  ) -> Result<usize> {
    let mut committed = 0;
    let mut rest = entries.into_iter().peekable();
    while rest.peek().is_some() {
      let batch: Vec<PendingCounter> = rest.by_ref().take(FLUSH_BATCH).collect();
      if let Err(err) = self.commit_batch(&batch) {
        let mut pending = self.buffer.borrow_mut();
        pending.restore(batch.into_iter().chain(rest), since);
        if automatic {
          pending.failed_at = Some(Instant::now());
        }
        return Err(err);
      }
      committed += batch.len();
    }
    self.buffer.borrow_mut().failed_at = None;
    Ok(committed)
  }

  fn commit_batch(&self, batch: &[PendingCounter]) -> Result<()> {
    let tx =
      rusqlite::Transaction::new_unchecked(&self.conn, rusqlite::TransactionBehavior::Immediate)
        .ctx("starting a write")?;
    let before = self.before_own_commit();
    {
      let mut stmt = tx.prepare_cached(UPSERT).ctx("recording")?;
      for e in batch {
        stmt
          .execute(params![
            e.api_key_id,
            e.dimension_key,
            e.bucket,
            e.delta,
            e.updated_at
          ])
          .ctx("recording")?;
      }
    }
    // Read in the transaction, after the upserts: the version the cached counters will be
    // current at if they follow this commit.
    let data_version = before.and_then(|_| super::hot::data_version(&tx));
    let committed = tx.commit().ctx("committing");
    match committed {
      Ok(()) => self.after_own_commit(
        before,
        data_version,
        batch.iter().map(|e| {
          (
            e.api_key_id.as_str(),
            e.dimension_key.as_str(),
            e.bucket,
            e.delta,
          )
        }),
      ),
      Err(_) => self.hot.borrow_mut().invalidate(),
    }
    committed?;
    COMMITS.fetch_add(1, Ordering::Relaxed);
    Ok(())
  }

  /// Before a store operation other than the hot path's: commits the buffer, so the
  /// operation sees every record in the table — unless an automatic flush failed within
  /// the last second (the reads that matter add the buffer anyway). Failure keeps the
  /// buffer and is not the operation's failure.
  pub(crate) fn flush_before_use(&self) {
    let skip = {
      let pending = &*self.buffer.borrow();
      pending.is_empty() || pending.backing_off()
    };
    if !skip {
      let _ = self.flush_pending(true);
    }
  }

  /// Forgets what is buffered for one key's dimension key (`clear` deleted its rows).
  pub(super) fn discard_pending_counter(&self, api_key_id: &str, dimension_key: &str) {
    self
      .buffer
      .borrow_mut()
      .remove_counter(api_key_id, dimension_key);
  }

  /// Takes the whole buffer out (to carry it to the file now at the path).
  pub(crate) fn take_pending(&self) -> PendingWrites {
    let mut pending = std::mem::take(&mut *self.buffer.borrow_mut());
    pending.failed_at = None;
    pending
  }

  /// Adds a buffer taken from another connection to this one's, keeping its age.
  pub(crate) fn adopt_pending(&self, carried: PendingWrites) {
    self.buffer.borrow_mut().merge(carried);
  }

  /// Drops the buffer (its file is gone); returns how many counters were dropped.
  pub(super) fn discard_pending(&self) -> usize {
    std::mem::take(&mut *self.buffer.borrow_mut()).len()
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn briefly_puts_the_busy_timeout_back_even_after_a_panic() {
    let (_dir, db) = crate::store::sqlite::temp_db();
    let busy = || -> i64 {
      (db.conn)
        .pragma_query_value(None, "busy_timeout", |r| r.get(0))
        .unwrap()
    };
    let inside = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
      db.briefly(|_| -> Result<()> { panic!("{}", busy()) })
    }));
    assert!(inside.is_err());
    assert_eq!(busy(), 2000);
  }
}
