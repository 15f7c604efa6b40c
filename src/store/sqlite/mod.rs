//! The SQLite driver: the host's `storage.sqlite`, shared with the host's own connection.
//!
//! - `locks.rs`: the OFD-lock and close hooks that keep the host's locks intact; `open.rs`:
//!   [`SqliteDb::open`] (pragmas, migrations, the lock self-test); `path.rs`: where the
//!   database is; `migrations.rs`: the embedded `migrations/*.sql`, applied idempotently.
//! - `counters.rs`: the sliding-window counters (the host's `db/quotaConsumption.ts`);
//!   `usage.rs`: the pool usage snapshot; `metadata.rs` and `cache.rs`: pools, allocations,
//!   plans, model caps, settings, and the hot path's cache of them.
//! - `hot.rs`: the hot path's reads, from memory while nothing was committed (known from
//!   `wal_index.rs`); `record_buffer.rs`: records buffered and committed together;
//!   `admission.rs`: reserve mode's enforce and settle.
//! - `inspect.rs`: the CLI's read-only look; `gc.rs`: retention and the totals
//!   reconciliation (the sweep itself is `engine/database.rs`'s).

mod admission;
mod cache;
mod counters;
mod gc;
mod hot;
mod inspect;
pub mod locks;
mod metadata;
mod migrations;
mod open;
mod path;
mod record_buffer;
mod usage;
mod values;
mod wal_index;

pub use cache::KeyPools;
pub(crate) use gc::retention_cutoff;
pub use gc::{TotalsCursor, GC_CHUNK, RECONCILE_BATCH};
pub use inspect::{inspect_open, inspect_path, DatabaseInspection, PoisonedCounters};
pub use locks::{HookStatus, LockCheck};
pub use migrations::migration_status;
pub(crate) use open::{file_id, shm_path, wal_path, FileId};
pub use open::{OpenOptions, OpenReport};
pub use path::default_db_path;
pub(crate) use record_buffer::PendingWrites;
pub use record_buffer::{
  record_commits, Dropped, Recorded, FLUSH_AT, FLUSH_BATCH, RETRY_AFTER_FAILURE,
};

use crate::error::{QuotaError, Result};
use rusqlite::TransactionBehavior::{Deferred, Immediate};
use rusqlite::{ffi, Connection};
use std::cell::RefCell;
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

/// One connection to one database file, with the metadata cache of the hot path.
///
/// Exactly one per file per process (see `locks.rs`): [`SqliteDb::open`] refuses a second
/// one. The engine holds its one connection in `engine/database.rs`. Not `Sync`: share it
/// behind a `Mutex`.
pub struct SqliteDb {
  conn: Connection,
  path: PathBuf,
  file_id: Option<open::FileId>,
  /// The connection's own descriptor of the file, when known (see `file_replaced`).
  fd: Option<c_int>,
  /// When the path was last looked up and named this file; `None`: look it up next time.
  path_checked: std::cell::Cell<Option<std::time::Instant>>,
  report: OpenReport,
  busy_timeout: std::time::Duration,
  cache: RefCell<cache::MetadataCache>,
  hot: RefCell<hot::HotState>,
  buffer: RefCell<record_buffer::PendingWrites>,
}

impl std::fmt::Debug for SqliteDb {
  fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    f.debug_struct("SqliteDb")
      .field("path", &self.path)
      .field("report", &self.report)
      .finish_non_exhaustive()
  }
}

impl SqliteDb {
  /// The database file this connection opened.
  pub fn path(&self) -> &Path {
    &self.path
  }

  /// What opening found: SQLite version, lock self-test, journal mode, migrations.
  pub fn open_report(&self) -> &OpenReport {
    &self.report
  }

  /// Runs `f` inside one read transaction (`BEGIN DEFERRED … COMMIT`), or inside the
  /// transaction already open. Several statements then share one set of lock calls
  /// instead of taking and releasing the WAL read locks once per statement — most of the
  /// cost of a small read — and the metadata freshness check runs once, in the
  /// transaction's snapshot.
  pub fn read_scope<T>(&self, f: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
    self.scope("BEGIN", f)
  }

  /// Runs `f` inside one write transaction (`BEGIN IMMEDIATE … COMMIT`): all of its
  /// statements commit together or not at all, under one acquisition of the write lock.
  pub fn write_scope<T>(&self, f: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
    self.scope("BEGIN IMMEDIATE", f)
  }

  fn scope<T>(&self, begin: &str, f: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
    if !self.conn.is_autocommit() {
      return f(self);
    }
    self.begin_fresh(begin)?;
    let result = {
      // Reset even if `f` panics: a stale "fresh" flag would skip every later check.
      let _fresh = FreshFlag(self);
      f(self)
    };
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    match (result, self.exec_cached(end).ctx("ending a transaction")) {
      (Ok(value), Ok(())) => Ok(value),
      (Ok(_), Err(err)) => {
        let _ = self.conn.execute_batch("ROLLBACK");
        Err(err)
      }
      (Err(err), _) => Err(err),
    }
  }

  /// `begin`, then the freshness check inside the transaction; when that finds a schema
  /// change to migrate, the transaction is abandoned, the migration runs outside it, and
  /// the transaction starts again.
  fn begin_fresh(&self, begin: &str) -> Result<()> {
    for retry in [false, true] {
      self.exec_cached(begin).ctx("starting a transaction")?;
      if let Err(err) = self.refresh_cache() {
        let _ = self.conn.execute_batch("ROLLBACK");
        return Err(err);
      }
      if retry || !std::mem::take(&mut self.cache.borrow_mut().migration_pending) {
        break;
      }
      self.exec_cached("ROLLBACK").ctx("ending a transaction")?;
      self.refresh_cache()?;
    }
    self.cache.borrow_mut().scope_fresh = true;
    Ok(())
  }

  /// Runs a statement without parameters through the statement cache (`execute_batch`
  /// would parse it again on every call).
  fn exec_cached(&self, sql: &str) -> rusqlite::Result<()> {
    self.conn.prepare_cached(sql)?.execute([]).map(|_| ())
  }

  /// `load` in its own read transaction, or in the one already open.
  pub(crate) fn in_read<T>(&self, load: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    self.in_tx(Deferred, ["starting a read", "ending a read"], load)
  }

  /// `f` in its own IMMEDIATE transaction (all or nothing), or in the one already open.
  pub(crate) fn in_write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    self.in_tx(Immediate, ["starting a write", "committing"], f)
  }

  /// `f` in its own transaction (with the error contexts of its start and its commit),
  /// or in the one already open.
  fn in_tx<T>(
    &self,
    behavior: rusqlite::TransactionBehavior,
    [start, commit]: [&str; 2],
    f: impl FnOnce(&Connection) -> Result<T>,
  ) -> Result<T> {
    if !self.conn.is_autocommit() {
      return f(&self.conn);
    }
    let tx = rusqlite::Transaction::new_unchecked(&self.conn, behavior).ctx(start)?;
    let value = f(&tx)?;
    tx.commit().ctx(commit)?;
    Ok(value)
  }

  /// Brings the schema up to the embedded migrations now (what opening does); whether
  /// anything was created. Reads only when nothing is missing.
  pub fn check_schema(&self) -> Result<bool> {
    migrations::ensure_schema(&self.conn)
  }

  /// Rolls back a transaction left open by a caller that panicked.
  pub fn roll_back_abandoned(&self) {
    if !self.conn.is_autocommit() {
      let _ = self.conn.execute_batch("ROLLBACK");
    }
  }

  /// The underlying connection, for tests and diagnostics. Do not open another one to the
  /// same file, and do not leave a transaction open.
  pub fn connection(&self) -> &Connection {
    &self.conn
  }
}

/// The main database's `sqlite3_file`, valid while `conn` is open; `None` when SQLite has
/// none or no methods for it.
pub(crate) fn main_db_file(conn: &Connection) -> Option<NonNull<ffi::sqlite3_file>> {
  file_pointer(conn, ffi::SQLITE_FCNTL_FILE_POINTER)
}

/// The main database's WAL (or, without one, its rollback journal), like [`main_db_file`].
pub(crate) fn journal_file(conn: &Connection) -> Option<NonNull<ffi::sqlite3_file>> {
  file_pointer(conn, ffi::SQLITE_FCNTL_JOURNAL_POINTER)
}

/// `op`: one of the two file controls that write a `sqlite3_file *`.
fn file_pointer(conn: &Connection, op: c_int) -> Option<NonNull<ffi::sqlite3_file>> {
  let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
  // SAFETY: the handle is live; both pointer controls write a `sqlite3_file *` into `file`.
  let rc = unsafe {
    ffi::sqlite3_file_control(
      conn.handle(),
      c"main".as_ptr(),
      op,
      (&mut file as *mut *mut ffi::sqlite3_file).cast(),
    )
  };
  let file = NonNull::new(file).filter(|_| rc == ffi::SQLITE_OK)?;
  // SAFETY: a live `sqlite3_file` SQLite handed out.
  (!unsafe { file.as_ref() }.pMethods.is_null()).then_some(file)
}

/// A database in a fresh temporary folder (removed with the `TempDir`).
#[cfg(test)]
pub(crate) fn temp_db() -> (tempfile::TempDir, SqliteDb) {
  let dir = tempfile::tempdir().unwrap();
  let db = SqliteDb::open(&dir.path().join("storage.sqlite"), &OpenOptions::default()).unwrap();
  (dir, db)
}

/// Clears the scope's freshness flag when dropped.
struct FreshFlag<'a>(&'a SqliteDb);

impl Drop for FreshFlag<'_> {
  fn drop(&mut self) {
    self.0.cache.borrow_mut().scope_fresh = false;
  }
}

/// `rusqlite` failures as [`QuotaError::Store`], with what was being done.
pub(crate) trait StoreContext<T> {
  fn ctx(self, what: &str) -> Result<T>;
}

impl<T> StoreContext<T> for rusqlite::Result<T> {
  fn ctx(self, what: &str) -> Result<T> {
    self.map_err(|e| QuotaError::Store(format!("{what}: {e}")))
  }
}
