//! The background retention sweep (docs/contract.md §4): a plain detached thread (it never keeps
//! Node's event loop alive) that, every interval, deletes counter rows older than the
//! retention and reconciles the pool totals — through the same single connection,
//! taking its mutex for one short chunk at a time, never on the request path. It never
//! opens the database: while the connection is closed a pass does nothing.

use super::gc::{retention_cutoff, TotalsCursor, GC_CHUNK, RECONCILE_BATCH};
use super::handle::with_open_db;
use crate::error::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
  /// Counter rows deleted.
  pub deleted: usize,
  /// Totals rows rewritten by the reconciliation.
  pub totals_fixed: usize,
}

static STARTED: AtomicBool = AtomicBool::new(false);

/// One pass over the process's connection: `None` when it is not open. Each chunk of
/// deletes and each reconciliation batch takes the connection's mutex separately, so
/// requests interleave with a long pass.
pub fn run_retention_sweep(retention_days: f64, now_ms: i64) -> Option<Result<SweepReport>> {
  let cutoff = match retention_cutoff(retention_days, now_ms) {
    Ok(c) => c,
    Err(e) => return Some(Err(e)),
  };
  let mut report = SweepReport::default();
  // Reserve admission's reservations past their expiry (docs/admission.md).
  if let Err(e) = with_open_db(|db| db.gc_reservations(now_ms))? {
    return Some(Err(e));
  }
  loop {
    match with_open_db(|db| db.gc_chunk(cutoff, GC_CHUNK))? {
      Ok(n) => {
        report.deleted += n;
        if n < GC_CHUNK {
          break;
        }
      }
      Err(e) => return Some(Err(e)),
    }
  }
  let mut cursor: Option<TotalsCursor> = None;
  loop {
    let step = with_open_db(|db| db.reconcile_totals_batch(cursor.as_ref(), RECONCILE_BATCH));
    match step {
      None => break,
      Some(Err(e)) => return Some(Err(e)),
      Some(Ok((fixed, next))) => {
        report.totals_fixed += fixed;
        match next {
          Some(c) => cursor = Some(c),
          None => break,
        }
      }
    }
  }
  Some(Ok(report))
}

/// Starts the sweeper thread once per process (later calls return `false` and change
/// nothing). Every `interval` it runs [`run_retention_sweep`] with `retention_days()`
/// (read each pass, so configuration changes apply) and hands the outcome of each pass
/// that ran to `on_result` (for logging).
pub fn spawn_retention_sweeper(
  interval: Duration,
  retention_days: impl Fn() -> f64 + Send + 'static,
  on_result: impl Fn(Result<SweepReport>) + Send + 'static,
) -> bool {
  if STARTED.swap(true, Ordering::SeqCst) {
    return false;
  }
  let spawned = std::thread::Builder::new()
    .name("quota-retention".into())
    .spawn(move || loop {
      std::thread::sleep(interval);
      let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
      if let Some(outcome) = run_retention_sweep(retention_days(), now_ms) {
        on_result(outcome);
      }
    });
  if spawned.is_err() {
    STARTED.store(false, Ordering::SeqCst);
    return false;
  }
  true
}
