//! When the hot path may use the Redis counter view (docs/redis.md#the-counter-view), and
//! the task that keeps its tracking connection: subscribed at the first default-mode
//! enforce on a URL, reconnected after a drop (the view is empty and unused meanwhile),
//! given up — with one warning — when the server refuses RESP3 or tracking, ended when
//! the backend is forgotten.

use super::config::{AdmissionMode, REDIS_DIRECT, REDIS_VIEW_MS};
use super::{Engine, Step};
use crate::core::dimensions::DimensionKey;
use crate::error::Result;
use crate::store::redis::counters;
use crate::store::redis::tracking::{subscribe, TrackingError};
use crate::store::redis::view::{CounterView, Tracking};
use crate::store::redis::{ReadBatch, RedisBackend};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The first wait before a lost tracking connection is opened again; doubled per failure.
const FIRST_RETRY: Duration = Duration::from_millis(50);
/// The longest wait between two attempts.
const LAST_RETRY: Duration = Duration::from_secs(2);

impl Engine {
  /// The view of `backend` and its maximum staleness (ms), when the view is on
  /// (`QUOTA_STORE_REDIS_VIEW_MS` above 0, one server, a runtime to track on); its
  /// tracking connection is started the first time. Default admission only: reserve
  /// mode's script decides on what Redis holds.
  pub(super) fn redis_view(
    &'static self,
    backend: &Arc<RedisBackend>,
  ) -> Option<(Arc<CounterView>, i64)> {
    let max_age = self.number(&REDIS_VIEW_MS);
    if max_age <= 0.0 || !backend.supports_view() || self.spawner.get().is_none() {
      return None;
    }
    let view = backend.view();
    if view.start() {
      let weak = Arc::downgrade(backend);
      let view = view.clone();
      self.in_background(Step::later(self.track(weak, view)));
    }
    Some((view.clone(), max_age as i64))
  }

  /// `peek` on Redis (docs/redis.md#the-counter-view): from the view when it holds the key's
  /// two buckets, read less than the maximum staleness ago and changed by no one since —
  /// with this process's buffered records added, as enforce does — else one `read.lua`
  /// after this process's buffer is flushed, whose answer becomes the view's entry. Reserve
  /// mode always reads (as its enforce does).
  pub(super) fn peek_on_redis(
    &'static self,
    backend: Arc<RedisBackend>,
    api_key_id: String,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    let batch = match counters::peek_batch(&backend, &api_key_id, &key, now_ms) {
      Ok(batch) => batch,
      Err(err) => return Step::Now(Err(err)),
    };
    self.view_or_read(backend, batch, key.window.ms(), now_ms)
  }

  /// `batch`'s one value from the view when it holds it ([`Engine::viewed`]), else read
  /// after the buffer's flush and kept in the view ([`Engine::read_kept`]).
  fn view_or_read(
    &'static self,
    backend: Arc<RedisBackend>,
    batch: ReadBatch,
    window_ms: i64,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    match self.viewed(&backend, &batch, now_ms, window_ms) {
      Some(value) => Step::Now(Ok(value)),
      None => self.read_kept(backend, batch, now_ms, window_ms),
    }
  }

  /// The effective value of `batch`'s one read from the view, when the view holds it (read
  /// less than the maximum staleness ago, changed by no one since), with this process's
  /// buffered records added as after a read. Default admission only: reserve mode reads.
  fn viewed(
    &'static self,
    backend: &Arc<RedisBackend>,
    batch: &ReadBatch,
    now_ms: i64,
    window_ms: i64,
  ) -> Option<f64> {
    if self.admission() == AdmissionMode::Reserve {
      return None;
    }
    let (view, max_age) = self.redis_view(backend)?;
    let (mut values, epoch) = view.lookup(batch, now_ms, max_age)?;
    self.redis_writes.overlay(backend.url(), batch, &mut values);
    // Checked after the buffer is read: a flush that settled meanwhile dropped the entry.
    view
      .unchanged(epoch)
      .then(|| values[0].effective(now_ms, window_ms))
  }

  /// `batch`'s one read after this process's buffer is flushed, its answer kept by the view
  /// (default admission), the buffer added.
  fn read_kept(
    &'static self,
    backend: Arc<RedisBackend>,
    batch: ReadBatch,
    now_ms: i64,
    window_ms: i64,
  ) -> Step<Result<f64>> {
    let view = match self.admission() {
      AdmissionMode::Reserve => None,
      AdmissionMode::Default => self.redis_view(&backend),
    };
    let url = backend.url().to_string();
    let read = Step::later(async move {
      // Under the read gate, as enforce's read: no flush is out while the read is, so the
      // buffer added below is what Redis did not count (engine/redis_writes.rs).
      let gate = self.redis_writes.gate(backend.url());
      let _shared = gate.read().await;
      let stamp = view.as_ref().and_then(|(view, _)| view.stamp(&batch));
      let mut values = counters::read(&backend, &batch).await?;
      if let (Some((view, _)), Some(stamp)) = (&view, stamp) {
        view.keep(batch.clone(), &values, stamp, now_ms);
      }
      self
        .redis_writes
        .overlay(backend.url(), &batch, &mut values);
      Ok(values[0].effective(now_ms, window_ms))
    });
    self.after_redis_flush(&url, read)
  }

  /// Whether calls to `backend` may use the calling thread's direct connection
  /// (docs/redis.md#the-direct-connection): `QUOTA_STORE_REDIS_DIRECT` is 1 and the URL is
  /// a plain single server.
  pub fn redis_direct(&self, backend: &RedisBackend) -> bool {
    self.number(&REDIS_DIRECT) >= 1.0 && crate::store::redis::direct::supported(backend)
  }

  /// `peek`, for a caller that can send its read on the calling thread's direct connection
  /// (docs/redis.md#the-direct-connection): the answer or the step as [`Engine::peek`]
  /// gives it, or — a read needed on a plain single server with nothing of this process
  /// buffered (nothing to flush first, nothing to add) — the read to send.
  pub fn peek_direct(
    &'static self,
    driver: &super::driver::Driver,
    api_key_id: String,
    key: DimensionKey,
    now_ms: i64,
  ) -> std::result::Result<Step<Result<f64>>, Box<DirectPeek>> {
    let Some(url) = driver.url() else {
      return Ok(self.peek(driver, api_key_id, key, now_ms));
    };
    let backend = match self.redis_backend(url) {
      Ok(backend) => backend,
      Err(err) => return Ok(Step::Now(Err(err))),
    };
    if !self.redis_direct(&backend) || self.redis_writes.holds(url) {
      return Ok(self.peek_on_redis(backend, api_key_id, key, now_ms));
    }
    let step = self.peek_on_redis_view(&backend, &api_key_id, &key, now_ms);
    match step {
      Err(err) => Ok(Step::Now(Err(err))),
      Ok(Some(value)) => Ok(Step::Now(Ok(value))),
      Ok(None) => {
        let Ok(batch) = counters::peek_batch(&backend, &api_key_id, &key, now_ms) else {
          return Ok(self.peek_on_redis(backend, api_key_id, key, now_ms));
        };
        let view = match self.admission() {
          AdmissionMode::Reserve => None,
          AdmissionMode::Default => self.redis_view(&backend).map(|(view, _)| view),
        };
        let stamp = view.as_ref().and_then(|view| view.stamp(&batch));
        let call = batch.call();
        let packed = redis::cmd("EVALSHA")
          .arg(call.script.script().get_hash())
          .arg(call.keys.len())
          .arg(&call.keys)
          .arg(&call.args)
          .get_packed_command();
        Err(Box::new(DirectPeek {
          backend,
          packed,
          batch,
          stamp: view.zip(stamp),
          api_key_id,
          key,
          now_ms,
        }))
      }
    }
  }

  /// `poolConsumedTotal` on Redis: from the counter view when it holds the pool's buckets
  /// (the same rules and bound as enforce and peek, this process's buffered records added),
  /// else one read after the buffer's flush, whose answer the view keeps
  /// (docs/redis.md#the-counter-view).
  pub(super) fn pool_total_on_redis(
    &'static self,
    backend: Arc<RedisBackend>,
    batch: ReadBatch,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    self.view_or_read(backend, batch, key.window.ms(), now_ms)
  }

  /// The view's answer to a peek, if it has one (`Ok(None)`: a read is needed).
  fn peek_on_redis_view(
    &'static self,
    backend: &Arc<RedisBackend>,
    api_key_id: &str,
    key: &DimensionKey,
    now_ms: i64,
  ) -> Result<Option<f64>> {
    let batch = counters::peek_batch(backend, api_key_id, key, now_ms)?;
    Ok(self.viewed(backend, &batch, now_ms, key.window.ms()))
  }

  /// Keeps `view`'s tracking connection until the backend goes away or the server refuses.
  async fn track(&'static self, backend: Weak<RedisBackend>, view: Arc<CounterView>) {
    let mut retry = FIRST_RETRY;
    loop {
      if view.is_closed.load(std::sync::atomic::Ordering::Acquire) {
        return;
      }
      let (sender, mut pushes) = tokio::sync::mpsc::unbounded_channel();
      let attempt = match backend.upgrade() {
        Some(backend) => subscribe(&backend, sender).await,
        None => return,
      };
      match attempt {
        Ok(connection) => {
          view.set_tracking(Tracking::Up);
          self.metrics.redis_view_tracking(true);
          retry = FIRST_RETRY;
          let closed = view.closed.notified();
          tokio::pin!(closed);
          closed.as_mut().enable();
          if !view.is_closed.load(std::sync::atomic::Ordering::Acquire) {
            loop {
              tokio::select! {
                push = pushes.recv() => match push {
                  Some(push) if push.kind == redis::PushKind::Invalidate => {
                    view.invalidate_push(&push.data)
                  }
                  Some(push) if push.kind == redis::PushKind::Disconnection => break,
                  Some(_) => {}
                  None => break,
                },
                _ = &mut closed => break,
              }
            }
          }
          view.set_tracking(Tracking::Down);
          self.metrics.redis_view_tracking(false);
          drop(connection);
        }
        Err(TrackingError::Unsupported) => return,
        Err(TrackingError::Refused(error)) => {
          view.set_tracking(Tracking::Refused);
          self.logs.warn(
            "quota:store",
            "Redis refused client tracking (RESP3 and CLIENT TRACKING need Redis 6 or later); enforce reads its counters on every call",
            Some(error),
          );
          return;
        }
        Err(TrackingError::Unreachable(_)) => {
          // The command connection reports the outage; the view stays off meanwhile.
        }
      }
      tokio::time::sleep(retry).await;
      retry = (retry * 2).min(LAST_RETRY);
    }
  }
}

/// A peek's `read.lua` for the direct connection (see [`Engine::peek_direct`]).
pub struct DirectPeek {
  backend: Arc<RedisBackend>,
  /// EVALSHA of `read.lua` with the batch's keys and arguments.
  packed: Vec<u8>,
  batch: crate::store::redis::ReadBatch,
  /// The view and the stamp the read took, when its answer may be kept.
  stamp: Option<(Arc<CounterView>, crate::store::redis::view::Stamp)>,
  api_key_id: String,
  key: DimensionKey,
  now_ms: i64,
}

impl super::redis_direct::DirectCall for Box<DirectPeek> {
  type Value = f64;

  fn backend(&self) -> &Arc<RedisBackend> {
    &self.backend
  }

  fn take_packed(&mut self) -> Vec<u8> {
    std::mem::take(&mut self.packed)
  }

  /// The peek's answer from what came back — or, for a lost connection or a server that
  /// does not have the script (NOSCRIPT), the step that reads on the shared connection.
  fn finish(
    self,
    engine: &'static Engine,
    outcome: crate::store::redis::direct::Outcome,
  ) -> Step<Result<f64>> {
    use crate::store::redis::direct::Outcome;
    let reply = match outcome {
      Outcome::Reply(Err(err))
        if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
      {
        return self.shared(engine)
      }
      Outcome::Lost(_) => return self.shared(engine),
      Outcome::TimedOut(err) => return Step::Now(Err(err)),
      Outcome::Reply(Err(err)) => return Step::Now(Err(self.backend.classify(&err))),
      Outcome::Reply(Ok(value)) => value,
    };
    let values = redis::from_redis_value::<Vec<Option<String>>>(reply)
      .map_err(|e| {
        crate::error::QuotaError::Store(format!("Redis at {}: {e}", self.backend.display()))
      })
      .and_then(|reply| crate::store::redis::scripts::parse_pairs(&reply, self.batch.len()));
    Step::Now(values.map(|values| {
      if let Some((view, stamp)) = self.stamp {
        view.keep(self.batch, &values, stamp, self.now_ms);
      }
      values[0].effective(self.now_ms, self.key.window.ms())
    }))
  }
}

impl DirectPeek {
  /// The same peek on the shared connection.
  pub fn shared(self: Box<Self>, engine: &'static Engine) -> Step<Result<f64>> {
    engine.peek_on_redis(self.backend, self.api_key_id, self.key, self.now_ms)
  }
}
