//! The counter view (docs/redis.md#the-counter-view): what the hot path's last reads of one
//! Redis URL returned, so that an enforce whose counters did not change since is decided
//! on the calling thread, with no round trip. The server keeps it honest through Redis's
//! own client-side caching support: a tracking connection (RESP3 `CLIENT TRACKING … BCAST`
//! on the counters' prefixes; broadcasting, because the hot path reads inside a script,
//! which the `redis` crate's cache of plain read replies cannot serve) hears of every
//! change to a counter key by any client, and the entries that read that dimension go;
//! this process's own writes drop them when sent and when answered. An entry is used only
//! while younger than `QUOTA_STORE_REDIS_VIEW_MS` (the bound on what a lost invalidation
//! costs) and while the connection is up; a disconnect drops everything.
//!
//! Races are settled by stamps: a read takes a [`Stamp`] before it is sent, and its reply
//! is kept only if no invalidation of its dimensions (nor a reset) came meanwhile — an
//! invalidation that arrives before the reply means the reply may predate the change.
//! A lookup returns the view's epoch (bumped by every invalidation), which the caller
//! checks again after adding the write-behind buffer ([`CounterView::unchanged`]), so a
//! flush that settled in between is never missed by both.

use super::connection::{is_connection_failure, RedisBackend};
use super::keys::{BUCKET_PREFIX, TOTAL_PREFIX};
use super::scripts::ReadBatch;
use crate::core::enforce::Buckets;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, PushInfo, RedisError, ServerErrorKind};
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::mpsc::UnboundedSender;

/// At most this many entries are kept; past it the view starts empty again.
const MAX_ENTRIES: usize = 10_000;
/// At most this many dimensions' generations are kept; past it every stamp is void.
const MAX_DIMENSIONS: usize = 100_000;

/// The key prefixes the tracking connection subscribes to: every bucket and bucket total.
/// (Members sets change only with a bucket; reservations' states are not counters.)
pub const TRACKED_PREFIXES: [&str; 2] = [BUCKET_PREFIX, TOTAL_PREFIX];

struct Entry {
  batch: ReadBatch,
  values: Vec<Buckets>,
  /// The `now_ms` of the call that read the values.
  read_at: i64,
}

#[derive(Default)]
struct Inner {
  entries: HashMap<u64, Entry>,
  /// Per dimension part: the entries that read it (ids may outlive their entry).
  by_dimension: HashMap<String, Vec<u64>>,
  /// Per dimension part: how many invalidations it had.
  generations: HashMap<String, u64>,
  /// How many resets (drop everything) the view had.
  resets: u64,
}

/// The state a read saw before it was sent (see the module's notes).
#[derive(Debug, Clone, PartialEq)]
pub struct Stamp {
  resets: u64,
  generations: Vec<(String, u64)>,
}

/// The view of one Redis URL.
#[derive(Default)]
pub struct CounterView {
  inner: Mutex<Inner>,
  /// Bumped by every invalidation and reset.
  epoch: AtomicU64,
  /// The tracking connection is subscribed: entries are used and kept (not while it is
  /// starting, reconnecting, or was refused).
  up: AtomicBool,
  /// Set once the tracking connection was started.
  started: AtomicBool,
  /// Notified (once, kept until awaited) when the backend goes away: the tracking
  /// connection ends.
  pub(crate) closed: tokio::sync::Notify,
}

/// The dimension part of a counter key (`omniroute:quota:<id>:<dimension>:<bucket>` or
/// `omniroute:quota-total:<dimension>:<bucket>`, the standalone layout); `None` for a key
/// that is not a counter.
pub fn dimension_of_key(key: &str) -> Option<&str> {
  let rest = if let Some(rest) = key.strip_prefix(TOTAL_PREFIX) {
    rest
  } else {
    let rest = key.strip_prefix(BUCKET_PREFIX)?;
    // The API key id has no `:` (escaped in names).
    &rest[rest.find(':')? + 1..]
  };
  Some(&rest[..rest.rfind(':')?])
}

impl CounterView {
  fn lock(&self) -> MutexGuard<'_, Inner> {
    self.inner.lock().unwrap_or_else(|e| e.into_inner())
  }

  /// Whether the tracking connection is subscribed.
  pub fn is_up(&self) -> bool {
    self.up.load(Ordering::Acquire)
  }

  /// Records whether the tracking connection is subscribed; either way every entry goes
  /// (reads stamped while it was down must not be kept: their changes went unheard).
  pub fn set_up(&self, up: bool) {
    if !up {
      self.up.store(false, Ordering::Release);
    }
    self.reset();
    if up {
      self.up.store(true, Ordering::Release);
    }
  }

  /// `true` the first time: the caller starts the tracking connection.
  pub fn start(&self) -> bool {
    !self.started.swap(true, Ordering::AcqRel)
  }

  /// The values `batch` read at most `max_age_ms` before `now_ms`, unchanged since, and
  /// the epoch to check again with [`CounterView::unchanged`] once they are used.
  pub fn lookup(
    &self,
    batch: &ReadBatch,
    now_ms: i64,
    max_age_ms: i64,
  ) -> Option<(Vec<Buckets>, u64)> {
    if !self.is_up() {
      return None;
    }
    let inner = self.lock();
    let epoch = self.epoch.load(Ordering::SeqCst);
    let entry = inner.entries.get(&batch.fingerprint())?;
    let age = now_ms.checked_sub(entry.read_at)?;
    if !(0..max_age_ms).contains(&age) || !entry.batch.same_reads(batch) {
      return None;
    }
    Some((entry.values.clone(), epoch))
  }

  /// Whether nothing was invalidated since the lookup that returned `epoch`.
  pub fn unchanged(&self, epoch: u64) -> bool {
    self.epoch.load(Ordering::SeqCst) == epoch
  }

  /// The stamp of a read of `batch` about to be sent, or `None` when its reply cannot be
  /// kept (tracking is not up).
  pub fn stamp(&self, batch: &ReadBatch) -> Option<Stamp> {
    if !self.is_up() {
      return None;
    }
    let parts = batch.dimension_parts();
    let inner = self.lock();
    Some(Stamp {
      resets: inner.resets,
      generations: parts
        .into_iter()
        .map(|part| {
          let generation = inner.generations.get(&part).copied().unwrap_or(0);
          (part, generation)
        })
        .collect(),
    })
  }

  /// Keeps `values`, `batch`'s reply read at `read_at`, when nothing it read was
  /// invalidated since `stamp` was taken and tracking is still up.
  pub fn keep(&self, batch: ReadBatch, values: &[Buckets], stamp: Stamp, read_at: i64) -> bool {
    if !self.is_up() {
      return false;
    }
    let mut inner = self.lock();
    let current = stamp.resets == inner.resets
      && stamp
        .generations
        .iter()
        .all(|(part, generation)| inner.generations.get(part).copied().unwrap_or(0) == *generation);
    if !current {
      return false;
    }
    if inner.entries.len() >= MAX_ENTRIES {
      inner.entries.clear();
      inner.by_dimension.clear();
    }
    let id = batch.fingerprint();
    for (part, _) in stamp.generations {
      let ids = inner.by_dimension.entry(part).or_default();
      if !ids.contains(&id) {
        ids.push(id);
      }
    }
    inner.entries.insert(
      id,
      Entry {
        batch,
        values: values.to_vec(),
        read_at,
      },
    );
    true
  }

  /// A change to the counter `key` (by anyone): the entries that read its dimension go.
  /// A key of our prefixes that does not parse drops everything.
  pub fn invalidate_key(&self, key: &str) {
    match dimension_of_key(key) {
      Some(part) => {
        let mut inner = self.lock();
        if inner.generations.len() >= MAX_DIMENSIONS && !inner.generations.contains_key(part) {
          drop(inner);
          self.reset();
          return;
        }
        *inner.generations.entry(part.to_string()).or_insert(0) += 1;
        if let Some(ids) = inner.by_dimension.remove(part) {
          for id in ids {
            inner.entries.remove(&id);
          }
        }
        self.epoch.fetch_add(1, Ordering::SeqCst);
      }
      None if TRACKED_PREFIXES.iter().any(|p| key.starts_with(p)) => self.reset(),
      None => {}
    }
  }

  /// Drops every entry and voids every stamp taken before.
  pub fn reset(&self) {
    let mut inner = self.lock();
    inner.entries.clear();
    inner.by_dimension.clear();
    inner.generations.clear();
    inner.resets += 1;
    self.epoch.fetch_add(1, Ordering::SeqCst);
  }

  /// An `invalidate` push: its keys, or — a nil payload (FLUSHDB, FLUSHALL) — everything.
  pub fn invalidate_push(&self, data: &[redis::Value]) {
    for value in data {
      let (redis::Value::Array(keys) | redis::Value::Set(keys)) = value else {
        self.reset();
        continue;
      };
      for key in keys {
        match key {
          redis::Value::BulkString(bytes) => match std::str::from_utf8(bytes) {
            Ok(key) => self.invalidate_key(key),
            Err(_) => self.reset(),
          },
          redis::Value::SimpleString(key) => self.invalidate_key(key),
          _ => self.reset(),
        }
      }
    }
  }

  /// The backend went away: the tracking connection ends.
  pub fn close(&self) {
    self.closed.notify_one();
    self.set_up(false);
  }
}

/// Why a tracking connection could not be had.
#[derive(Debug)]
pub enum TrackingError {
  /// The server has no such feature (no `HELLO 3` or no `CLIENT TRACKING`: Redis < 6, a
  /// proxy that does not pass them, an ACL that forbids them): there will be no view on
  /// this URL.
  Refused(String),
  /// Not now: the server could not be reached (`None`), or answered with an error that may
  /// pass (a password being changed, a failover, a proxy's own refusal): try again later.
  NotNow(Option<String>),
}

impl From<RedisError> for TrackingError {
  fn from(err: RedisError) -> Self {
    let unknown = || {
      let detail = err.detail().unwrap_or_default().to_ascii_lowercase();
      detail.contains("unknown command") || detail.contains("unknown subcommand")
    };
    let refused = match err.kind() {
      ErrorKind::RESP3NotSupported | ErrorKind::Server(ServerErrorKind::NoPerm) => true,
      ErrorKind::Server(ServerErrorKind::ResponseError) => unknown(),
      _ => err.code() == Some("NOPROTO"),
    };
    match (is_connection_failure(&err), refused) {
      (true, _) => TrackingError::NotNow(None),
      (false, true) => TrackingError::Refused(err.to_string()),
      (false, false) => TrackingError::NotNow(Some(err.to_string())),
    }
  }
}

/// Opens the tracking connection of `backend`'s server (one server: see
/// `RedisBackend::supports_view`), its pushes — the server's `invalidate`s, the library's
/// `Disconnection` when the socket closes — sent to `pushes`. It stays subscribed while
/// the returned value lives.
pub async fn subscribe(
  backend: &RedisBackend,
  pushes: UnboundedSender<PushInfo>,
) -> Result<MultiplexedConnection, TrackingError> {
  let client = backend.resp3_client()?;
  let config = AsyncConnectionConfig::new()
    .set_connection_timeout(Some(backend.timeout()))
    .set_response_timeout(Some(backend.timeout()))
    .set_push_sender(pushes);
  let work = async {
    let mut conn = client
      .get_multiplexed_async_connection_with_config(&config)
      .await?;
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("TRACKING").arg("ON").arg("BCAST");
    for prefix in TRACKED_PREFIXES {
      cmd.arg("PREFIX").arg(prefix);
    }
    cmd.query_async::<()>(&mut conn).await?;
    Ok::<_, TrackingError>(conn)
  };
  tokio::time::timeout(backend.timeout() * 2, work)
    .await
    .unwrap_or(Err(TrackingError::NotNow(None)))
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::dimensions::{DimensionKey, QuotaUnit, QuotaWindow};
  use crate::store::redis::{KeyLayout, PoolTotals};

  fn batch(pool: &str, current: i64) -> ReadBatch {
    let key = DimensionKey::new(pool, QuotaUnit::Requests, QuotaWindow::Hourly);
    let mut batch = ReadBatch::new(KeyLayout::Standalone, PoolTotals::Exact, ["k1".to_string()]);
    batch.key("k1", &key, current);
    batch.pool(&key, current);
    batch
  }

  fn values() -> Vec<Buckets> {
    [(1.0, 0.0), (5.0, 2.0)]
      .map(|(curr, prev)| Buckets { curr, prev })
      .to_vec()
  }

  fn up() -> CounterView {
    let view = CounterView::default();
    view.set_up(true);
    view
  }

  #[test]
  fn counter_keys_name_their_dimension() {
    assert_eq!(
      dimension_of_key("omniroute:quota:key-1:pool-9:tokens:daily:20000"),
      Some("pool-9:tokens:daily")
    );
    assert_eq!(
      dimension_of_key("omniroute:quota:k%3A1:p:model:gpt%3A4:requests:hourly:-1"),
      Some("p:model:gpt%3A4:requests:hourly")
    );
    assert_eq!(
      dimension_of_key("omniroute:quota-total:pool-9:tokens:daily:7"),
      Some("pool-9:tokens:daily")
    );
    assert_eq!(dimension_of_key("omniroute:quota-reservation:abc"), None);
    assert_eq!(dimension_of_key("omniroute:quota:nocolon"), None);
  }

  #[test]
  fn an_invalidation_drops_the_entries_of_its_dimension_only() {
    let view = up();
    let (p, q) = (batch("p", 10), batch("q", 10));
    for b in [&p, &q] {
      let stamp = view.stamp(b).unwrap();
      assert!(view.keep(b.clone(), &values(), stamp, 0));
    }
    // Only what was read answers: not another bucket or pool. (The age bound is
    // `__test__/redis-view.test.mjs`, 'the staleness bound…'.)
    assert!(view.lookup(&batch("p", 11), 0, 100).is_none());
    assert!(view.lookup(&batch("r", 10), 0, 100).is_none());
    let (_, epoch) = view.lookup(&q, 0, 100).unwrap();
    view.invalidate_key("omniroute:quota:other-key:p:requests:hourly:10");
    assert!(view.lookup(&p, 0, 100).is_none());
    assert!(view.lookup(&q, 0, 100).is_some());
    assert!(
      !view.unchanged(epoch),
      "a lookup made before sees the epoch move"
    );
    view.invalidate_push(&[redis::Value::Nil]);
    assert!(
      view.lookup(&q, 0, 100).is_none(),
      "a flush drops everything"
    );
  }

  #[test]
  fn a_reply_is_not_kept_after_an_invalidation_that_came_while_it_was_out() {
    let view = up();
    let b = batch("p", 10);
    let stamp = view.stamp(&b).unwrap();
    view.invalidate_key("omniroute:quota-total:p:requests:hourly:10");
    assert!(!view.keep(b.clone(), &values(), stamp, 0));
    assert!(view.lookup(&b, 0, 100).is_none());
    // Another dimension's change does not void it.
    let stamp = view.stamp(&b).unwrap();
    view.invalidate_key("omniroute:quota:k1:q:requests:hourly:10");
    assert!(view.keep(b.clone(), &values(), stamp, 0));
  }

  #[test]
  fn nothing_is_used_or_kept_while_tracking_is_down() {
    let view = up();
    let b = batch("p", 10);
    let stamp = view.stamp(&b).unwrap();
    assert!(view.keep(b.clone(), &values(), stamp.clone(), 0));
    view.set_up(false);
    assert!(view.lookup(&b, 0, 100).is_none());
    assert!(view.stamp(&b).is_none());
    assert!(!view.keep(b.clone(), &values(), stamp.clone(), 0));
    view.set_up(true);
    assert!(
      view.lookup(&b, 0, 100).is_none(),
      "a reconnect starts empty"
    );
    assert!(
      !view.keep(b, &values(), stamp, 0),
      "a read stamped before the reconnect"
    );
  }
}
