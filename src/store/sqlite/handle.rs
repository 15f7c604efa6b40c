//! The engine's one connection, process-wide (docs/contract.md §0, §4).
//!
//! Every worker thread that loads the addon shares these statics, so there is exactly one
//! engine connection per process, behind a mutex, opened lazily on first use (the path is
//! resolved then, not at load) and closed by [`close_quota_db`] — the host's
//! `registerDbStateResetter` hook — after which the next call reopens, resolving the path
//! again. A path that no longer names the file the connection has open (the data
//! directory was deleted, maybe recreated) is noticed on the next call (an `fstat` of the
//! connection's descriptor, see `SqliteDb::file_replaced`) and the connection is replaced:
//! the engine never keeps using a deleted file.

use super::locks;
use super::open::OpenOptions;
use super::SqliteDb;
use crate::error::Result;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

static DB: Mutex<Option<SqliteDb>> = Mutex::new(None);
/// Whether [`DB`] holds a connection, readable without taking the lock.
static OPEN: AtomicBool = AtomicBool::new(false);

/// Whether the connection is open (a hint: another thread may change it at any moment).
pub fn is_open() -> bool {
  OPEN.load(Ordering::Acquire)
}
static OPTIONS: Mutex<Option<OpenOptions>> = Mutex::new(None);

fn lock_db() -> MutexGuard<'static, Option<SqliteDb>> {
  DB.lock().unwrap_or_else(|poisoned| {
    // A panic inside a caller's closure: any transaction guard rolled back on unwind;
    // make sure, and go on with the connection.
    DB.clear_poison();
    let guard = poisoned.into_inner();
    if let Some(db) = guard.as_ref() {
      if !db.conn.is_autocommit() {
        let _ = db.conn.execute_batch("ROLLBACK");
      }
    }
    guard
  })
}

/// Options for the next open (the busy timeout); the open connection keeps its own.
pub fn set_open_options(options: OpenOptions) {
  *OPTIONS.lock().unwrap_or_else(|e| e.into_inner()) = Some(options);
}

fn open_options() -> OpenOptions {
  OPTIONS
    .lock()
    .unwrap_or_else(|e| e.into_inner())
    .clone()
    .unwrap_or_default()
}

/// Runs `f` with the process's connection, opening it first if needed at
/// `resolve_path()` (called only when opening). Holds the connection's mutex for the
/// duration of `f`: keep `f` short, and do not call `with_db` from inside it (the mutex
/// is not reentrant).
/// Buffered records are committed first (see `record_buffer.rs`), so `f` sees them in the
/// table.
pub fn with_db<T>(
  resolve_path: &dyn Fn() -> PathBuf,
  f: impl FnOnce(&mut SqliteDb) -> Result<T>,
) -> Result<T> {
  with_hot_db(resolve_path, |db| {
    db.flush_before_use();
    f(db)
  })
}

/// [`with_db`] for the hot path, which reads buffered records itself: no flush first.
pub fn with_hot_db<T>(
  resolve_path: &dyn Fn() -> PathBuf,
  f: impl FnOnce(&mut SqliteDb) -> Result<T>,
) -> Result<T> {
  let mut slot = lock_db();
  if slot.as_ref().is_some_and(SqliteDb::file_replaced) {
    if let Some(stale) = slot.take() {
      OPEN.store(false, Ordering::Release);
      let _ = stale.close();
    }
  }
  if slot.is_none() {
    locks::sweep_parked();
    *slot = Some(SqliteDb::open(&resolve_path(), &open_options())?);
    OPEN.store(true, Ordering::Release);
  }
  match slot.as_mut() {
    Some(db) => f(db),
    None => unreachable!("opened above"),
  }
}

/// Runs `f` only if the connection is open (never opens it): `None` otherwise. For
/// background work, which must not create a database the host has not asked for.
/// Buffered records are committed first.
pub fn with_open_db<T>(f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Option<Result<T>> {
  with_hot_open_db(|db| {
    db.flush_before_use();
    f(db)
  })
}

/// [`with_open_db`] without committing buffered records first.
pub fn with_hot_open_db<T>(f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Option<Result<T>> {
  let mut slot = lock_db();
  if slot.as_ref().is_some_and(SqliteDb::file_replaced) {
    if let Some(stale) = slot.take() {
      OPEN.store(false, Ordering::Release);
      let _ = stale.close();
    }
    return None;
  }
  slot.as_mut().map(f)
}

/// `closeQuotaDb()`: closes the connection (prepared statements and cached rows go with
/// it); the next [`with_db`] reopens. Closing while the host still has the file open is
/// safe on Linux (the close hook parks the descriptors); the host's reset order closes its
/// own connection first anyway.
/// Returns what it could not commit of the buffered records.
pub fn close_quota_db() -> Result<Option<super::record_buffer::Dropped>> {
  let closed = {
    let mut slot = lock_db();
    OPEN.store(false, Ordering::Release);
    slot.take().map(SqliteDb::close)
  };
  locks::sweep_parked();
  closed.unwrap_or(Ok(None))
}
