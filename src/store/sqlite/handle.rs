//! The engine's one connection, process-wide (docs/contract.md §0, §4).
//!
//! Every worker thread that loads the addon shares these statics, so there is exactly one
//! engine connection per process, behind a mutex, opened lazily on first use (the path is
//! resolved then, not at load) and closed by [`close_quota_db`] — the host's
//! `registerDbStateResetter` hook — after which the next call reopens, resolving the path
//! again. A path that no longer names the file the connection has open (the data
//! directory was deleted, maybe recreated) is noticed on the next call (an `fstat` of the
//! connection's descriptor, see `SqliteDb::file_replaced`) and the connection is replaced:
//! the engine never keeps using a deleted file. Its buffered records follow the path
//! (docs/reliability.md, "Durability of records"): when another file is at the path now
//! (replaced, or renamed away and a new one put there), they are carried to the new
//! connection and committed there; when nothing is at the path, they are committed to the
//! old file (still there under its new name, or deleted) and the engine says how many
//! left the path. Either way a [`FileChange`] is queued for the engine to log.

use super::locks;
use super::open::OpenOptions;
use super::record_buffer::PendingWrites;
use super::SqliteDb;
use crate::error::Result;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

static DB: Mutex<Option<SqliteDb>> = Mutex::new(None);

/// What became of buffered records when the connection's file was replaced or went away.
#[derive(Debug, Clone, PartialEq)]
pub enum FileChange {
  /// Another file is at the path now: the buffered counters are carried to it.
  Carried { counters: usize, path: PathBuf },
  /// No file is at the path: the counters were committed to the old file (`error`: they
  /// could not even be) — none of them is in a file at the path.
  Gone {
    counters: usize,
    path: PathBuf,
    error: Option<String>,
  },
}

/// Records taken from a replaced file's connection, for the next connection at the path.
static CARRIED: Mutex<Option<PendingWrites>> = Mutex::new(None);
static CHANGES: Mutex<Vec<FileChange>> = Mutex::new(Vec::new());
/// Whether [`CHANGES`] holds anything, readable without the lock (asked on every call).
static HAS_CHANGES: AtomicBool = AtomicBool::new(false);

/// The file changes noticed since the last call (for the engine to log).
pub fn take_file_changes() -> Vec<FileChange> {
  if !HAS_CHANGES.load(Ordering::Acquire) {
    return Vec::new();
  }
  let mut changes = CHANGES.lock().unwrap_or_else(|e| e.into_inner());
  HAS_CHANGES.store(false, Ordering::Release);
  std::mem::take(&mut *changes)
}

/// Buffered counters carried from a replaced file, waiting for the next open.
pub fn carried_count() -> usize {
  CARRIED
    .lock()
    .unwrap_or_else(|e| e.into_inner())
    .as_ref()
    .map_or(0, PendingWrites::len)
}

fn note(change: FileChange) {
  CHANGES
    .lock()
    .unwrap_or_else(|e| e.into_inner())
    .push(change);
  HAS_CHANGES.store(true, Ordering::Release);
}

/// Closes a connection whose file is no longer the one at its path (see the module
/// documentation for where its buffered records go).
fn retire(stale: SqliteDb) {
  OPEN.store(false, Ordering::Release);
  let counters = stale.pending_count();
  if counters == 0 {
    let _ = stale.close();
    return;
  }
  let path = stale.path().to_path_buf();
  if super::open::file_id(&path).is_some() {
    let pending = stale.take_pending();
    {
      let mut carried = CARRIED.lock().unwrap_or_else(|e| e.into_inner());
      match carried.as_mut() {
        Some(earlier) => earlier.merge(pending),
        None => *carried = Some(pending),
      }
    }
    let _ = stale.close();
    note(FileChange::Carried { counters, path });
  } else {
    let error = match stale.close() {
      Ok(None) => None,
      Ok(Some(dropped)) => Some(dropped.error),
      Err(err) => Some(err.to_string()),
    };
    note(FileChange::Gone {
      counters,
      path,
      error,
    });
  }
}

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
  hot_db(resolve_path, true, f)
}

/// [`with_hot_db`] for a record that only adds to the buffer: the file is not checked
/// (an `fstat` per record, docs/sqlite.md#file-replaced), since every commit of the
/// buffer looks the path up first ([`recheck_file`]) and the next read checks it too. A
/// record made after the file vanished goes with the records already buffered for it.
pub fn with_buffer_db<T>(
  resolve_path: &dyn Fn() -> PathBuf,
  f: impl FnOnce(&mut SqliteDb) -> Result<T>,
) -> Result<T> {
  hot_db(resolve_path, false, f)
}

fn hot_db<T>(
  resolve_path: &dyn Fn() -> PathBuf,
  check_file: bool,
  f: impl FnOnce(&mut SqliteDb) -> Result<T>,
) -> Result<T> {
  let mut slot = lock_db();
  if check_file && slot.as_ref().is_some_and(SqliteDb::file_replaced) {
    if let Some(stale) = slot.take() {
      retire(stale);
    }
  }
  if slot.is_none() {
    locks::sweep_parked();
    let db = SqliteDb::open(&resolve_path(), &open_options())?;
    if let Some(carried) = CARRIED.lock().unwrap_or_else(|e| e.into_inner()).take() {
      db.adopt_pending(carried);
    }
    *slot = Some(db);
    OPEN.store(true, Ordering::Release);
  }
  match slot.as_mut() {
    Some(db) => f(db),
    None => unreachable!("opened above"),
  }
}

/// Before buffered records are committed: looks the path up now (not at most every
/// 100 ms, as the per-call check does) and retires a connection whose file is no longer
/// the one at the path.
pub fn recheck_file() {
  let mut slot = lock_db();
  if slot.as_ref().is_some_and(SqliteDb::file_replaced_now) {
    if let Some(stale) = slot.take() {
      retire(stale);
    }
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
      retire(stale);
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
    match slot.take() {
      Some(stale) if stale.file_replaced_now() => {
        retire(stale);
        None
      }
      db => db.map(SqliteDb::close),
    }
  };
  locks::sweep_parked();
  closed.unwrap_or(Ok(None))
}
