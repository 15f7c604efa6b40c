//! When the hot path may use the Redis counter view (docs/redis.md#the-counter-view), the
//! reads that fill it, and the task that keeps its tracking connection: subscribed at the
//! first default-mode enforce on a URL, reconnected after a drop (the view is empty and
//! unused meanwhile; after a server error that may pass too, said once when it keeps
//! coming), given up — with one warning — when the server has no RESP3 or tracking, ended
//! when the backend is forgotten.

use super::config::{AdmissionMode, REDIS_VIEW_MS};
use super::{Engine, Step};
use crate::core::enforce::Buckets;
use crate::error::Result;
use crate::store::redis::counters;
use crate::store::redis::view::{subscribe, CounterView, TrackingError};
use crate::store::redis::{ReadBatch, RedisBackend};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The first wait before a lost tracking connection is opened again; doubled per failure.
const FIRST_RETRY: Duration = Duration::from_millis(50);
/// The longest wait between two attempts after a drop.
const LAST_RETRY: Duration = Duration::from_secs(2);
/// The longest wait after the server answered with an error: it may last (a proxy's own
/// refusal, a password that stays changed), so the attempts thin out.
const LAST_ANSWERED_RETRY: Duration = Duration::from_secs(30);
/// Server-answered failures in a row before they are said (once per run of them).
const ANSWERED_TO_WARN: u32 = 3;

/// A URL's counter view and its maximum staleness (ms).
pub(super) type View = (Arc<CounterView>, i64);

impl Engine {
  /// The view of `backend`, when the view is on (`QUOTA_STORE_REDIS_VIEW_MS` above 0, one
  /// server, a runtime to track on); its tracking connection is started the first time.
  /// Default admission only: reserve mode's script decides on what Redis holds.
  pub(super) fn redis_view(&'static self, backend: &Arc<RedisBackend>) -> Option<View> {
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

  /// `batch`'s values from `view`, when it holds them (read less than the maximum
  /// staleness ago, changed by no one since), with this process's buffered records added
  /// as after a read.
  pub(super) fn viewed(
    &self,
    backend: &RedisBackend,
    batch: &ReadBatch,
    (view, max_age): &View,
    now_ms: i64,
  ) -> Option<Vec<Buckets>> {
    let (mut values, epoch) = view.lookup(batch, now_ms, *max_age)?;
    self.redis_writes.overlay(backend.url(), batch, &mut values);
    // Checked after the buffer is read: a flush that settled meanwhile dropped the entry.
    view.unchanged(epoch).then_some(values)
  }

  /// `batch` read from Redis, its answer kept by `view` (as Redis answered: the buffer is
  /// added at each use), this process's buffered records added.
  pub(super) async fn read_kept(
    &self,
    backend: &RedisBackend,
    batch: ReadBatch,
    view: Option<View>,
    now_ms: i64,
  ) -> Result<Vec<Buckets>> {
    // Under the read gate: no flush is out while the read is, so the buffer added below
    // is what Redis did not count, each record once (engine/redis_writes.rs). The wait
    // for a flush that is out counts against the timeout too.
    let gate = self.redis_writes.gate(backend.url());
    backend
      .within(async {
        let _shared = gate.read().await;
        let stamp = view.as_ref().and_then(|(view, _)| view.stamp(&batch));
        let mut values = counters::read(backend, &batch).await?;
        if let (Some((view, _)), Some(stamp)) = (&view, stamp) {
          view.keep(batch.clone(), &values, stamp, now_ms);
        }
        self
          .redis_writes
          .overlay(backend.url(), &batch, &mut values);
        Ok(values)
      })
      .await
  }

  /// `peek` and `poolConsumedTotal` on Redis (`read`: the backend and batch, or why not):
  /// the batch's one value from the view (the same rules and bound as enforce), else one
  /// `read.lua` after this process's buffer is flushed, whose answer becomes the view's
  /// entry. Reserve mode always reads (as its enforce does).
  pub(super) fn redis_value(
    &'static self,
    read: Result<(Arc<RedisBackend>, ReadBatch)>,
    window_ms: i64,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    let (backend, batch) = match read {
      Ok(read) => read,
      Err(err) => return Step::Now(Err(err)),
    };
    let view = match self.admission() {
      AdmissionMode::Reserve => None,
      AdmissionMode::Default => self.redis_view(&backend),
    };
    let effective = move |values: Vec<Buckets>| values[0].effective(now_ms, window_ms);
    if let Some(values) = view
      .as_ref()
      .and_then(|v| self.viewed(&backend, &batch, v, now_ms))
    {
      return Step::Now(Ok(effective(values)));
    }
    let url = backend.url().to_string();
    let read = Step::later(async move {
      let values = self.read_kept(&backend, batch, view, now_ms).await;
      values.map(effective)
    });
    self.after_redis_flush(&url, read)
  }

  /// Keeps `view`'s tracking connection until the backend goes away or the server refuses.
  async fn track(&'static self, backend: Weak<RedisBackend>, view: Arc<CounterView>) {
    let mut retry = FIRST_RETRY;
    let mut answered = 0;
    loop {
      let (sender, mut pushes) = tokio::sync::mpsc::unbounded_channel();
      // Gone once the backend is dropped (which closes the view).
      let attempt = match backend.upgrade() {
        Some(backend) => subscribe(&backend, sender).await,
        None => return,
      };
      match attempt {
        Ok(connection) => {
          view.set_up(true);
          self.metrics.redis_view_tracking(true);
          retry = FIRST_RETRY;
          answered = 0;
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
              _ = view.closed.notified() => break,
            }
          }
          view.set_up(false);
          self.metrics.redis_view_tracking(false);
          drop(connection);
        }
        Err(TrackingError::Refused(error)) => {
          view.set_up(false);
          self.logs.warn(
            "quota:store",
            "Redis refused client tracking (RESP3 and CLIENT TRACKING need Redis 6 or later, and an ACL that allows CLIENT); enforce reads its counters on every call",
            Some(error),
          );
          return;
        }
        Err(TrackingError::NotNow(None)) => {
          // The command connection reports an outage; the view stays off meanwhile. A
          // drop ends a run of answered errors: it is retried as drops are.
          answered = 0;
        }
        Err(TrackingError::NotNow(Some(error))) => {
          answered += 1;
          if answered == ANSWERED_TO_WARN {
            self.logs.warn(
              "quota:store",
              "Redis keeps refusing the counter view's tracking connection; enforce reads its counters on every call until it is accepted",
              Some(error),
            );
          }
        }
      }
      tokio::time::sleep(retry).await;
      let last = if answered > 0 {
        LAST_ANSWERED_RETRY
      } else {
        LAST_RETRY
      };
      retry = (retry * 2).min(last);
    }
  }
}
