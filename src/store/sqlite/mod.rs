//! The SQLite driver: the host's `storage.sqlite`, shared with the host's own connection.
//!
//! - `locks.rs`: the OFD-lock and close hooks that keep the host's locks intact.
//! - `open.rs`: [`SqliteDb::open`] — pragmas, migrations, the lock self-test.
//! - `handle.rs`: the one process-wide connection ([`with_db`], [`close_quota_db`]).
//! - `path.rs`: where the database is ([`default_db_path`]).
//! - `migrations.rs`: the embedded `migrations/*.sql`, applied idempotently.
//! - `counters.rs`: the sliding-window counters and the host's `db/quotaConsumption.ts`.
//! - `usage.rs`: the pool usage snapshot.
//! - `metadata.rs`: pools, allocations, plans, model caps, settings.
//! - `cache.rs`: the hot path's metadata cache and its invalidation.
//! - `gc.rs`: retention and the totals reconciliation; `sweeper.rs`: the background sweep.

mod cache;
mod counters;
mod gc;
mod handle;
pub mod locks;
mod metadata;
mod migrations;
mod open;
mod path;
mod quota_source;
mod sweeper;
mod usage;
mod values;

pub use cache::KeyPools;
pub use gc::TotalsCursor;
pub use handle::{close_quota_db, set_open_options, with_db, with_open_db};
pub use locks::{HookStatus, LockCheck};
pub use open::{OpenOptions, OpenReport};
pub use path::default_db_path;
pub use sweeper::{run_retention_sweep, spawn_retention_sweeper, SweepReport};

use crate::error::QuotaError;
use rusqlite::Connection;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// One connection to one database file, with the metadata cache of the hot path.
///
/// Exactly one per file per process (see `locks.rs`): [`SqliteDb::open`] refuses a second
/// one. Usually reached through [`with_db`]. Not `Sync`: share it behind a `Mutex`.
pub struct SqliteDb {
  conn: Connection,
  path: PathBuf,
  file_id: Option<open::FileId>,
  report: OpenReport,
  cache: RefCell<cache::MetadataCache>,
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

  /// The underlying connection, for tests and diagnostics. Do not open another one to the
  /// same file, and do not leave a transaction open.
  pub fn connection(&self) -> &Connection {
    &self.conn
  }
}

/// `rusqlite` failures as [`QuotaError::Store`], with what was being done.
pub(crate) trait StoreContext<T> {
  fn ctx(self, what: &str) -> crate::error::Result<T>;
}

impl<T> StoreContext<T> for rusqlite::Result<T> {
  fn ctx(self, what: &str) -> crate::error::Result<T> {
    self.map_err(|e| QuotaError::Store(format!("{what}: {e}")))
  }
}
