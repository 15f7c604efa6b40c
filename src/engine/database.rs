//! The engine's database (docs/sqlite.md, "Which file", "One connection per process"):
//! where it is, and the engine's one connection to it, which both drivers use (the SQLite
//! driver's counters, either driver's metadata). The path setting is the engine's, so a
//! worker thread that never called `installHost` opens the file the main thread configured
//! (a resolver function runs only on its own thread; others use the path it last returned).
//! One connection per process keeps the host's locks safe (docs/two-sqlites.md). A
//! connection whose file was deleted or replaced is retired, its buffered records following
//! the path (docs/reliability.md, "Durability of records"), and a [`FileChange`] is queued
//! for the engine to log. [`SqliteDriver`], the `QuotaDriver` of these counters, is here too.

use super::config::process_env;
use super::driver::{CounterAt, Enforced, QuotaDriver, Settled, Written};
use super::hot_path::{Buffered, EnforceCall, RecordCall, Settle};
use super::saturation::DecisionLookup;
use super::telemetry::{LogQueue, LogValue, Operation};
use super::{relock, Engine, Step};
use crate::core::admission::estimated_cost;
use crate::core::dimensions::DimensionKey;
use crate::core::enforce::{consumption_writes, enforce};
use crate::error::{QuotaError, Result};
use crate::store::ids::new_reservation_id;
use crate::store::sqlite::{
  default_db_path, file_id, inspect_open, inspect_path, locks, retention_cutoff, shm_path,
  wal_path, DatabaseInspection, Dropped, FileId, OpenOptions, PendingWrites, Recorded, SqliteDb,
  TotalsCursor, GC_CHUNK, RECONCILE_BATCH, RETRY_AFTER_FAILURE,
};
use crate::store::{PlanDimension, PoolUsageSnapshot};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How long reserve admission decides unreserved, without trying, after failing to reserve.
const RESERVE_RETRY: Duration = Duration::from_secs(1);

/// How a call uses the connection (docs/sqlite.md#one-connection-per-process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
  /// Buffered records are committed first, and the call may write: the path is looked up
  /// every time (a store call, not a request's), so neither goes to a file renamed away a
  /// moment ago.
  Full,
  /// The hot path: it adds the buffer to its reads itself.
  Hot,
  /// [`Access::Hot`] for a decision whose crossing has just checked the file
  /// ([`Database::needs_open`], asked before each call when the path is a function): not
  /// checked twice.
  Checked,
  /// A record that only adds to the buffer: no file check (an `fstat` per record), since
  /// every commit of the buffer looks the path up first ([`Database::recheck_file`],
  /// `SqliteDb::record_writes`) and the next decision checks it too; a record made after
  /// the file vanished goes with the records already buffered for it.
  Buffer,
}

impl Access {
  /// How the connection's file is checked before the call: `None` for none.
  fn file_check(self) -> Option<fn(&SqliteDb) -> bool> {
    match self {
      Access::Full => Some(SqliteDb::file_replaced_now),
      Access::Hot => Some(SqliteDb::file_replaced),
      Access::Checked | Access::Buffer => None,
    }
  }
}

/// How the path is given.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum PathSource {
  /// `$DATA_DIR/storage.sqlite`, or the host's default data dir.
  #[default]
  Default,
  /// A fixed path.
  Fixed(PathBuf),
  /// A resolver on some JS thread; `last` is what it last returned.
  Resolver { last: Option<PathBuf> },
}

/// What became of buffered records when the connection's file was replaced or went away.
#[derive(Debug, Clone, PartialEq)]
pub enum FileChange {
  /// Another file is at the path now: the buffered counters are carried to it.
  Carried { counters: usize, path: PathBuf },
  /// The path is another one now (`installHost`, or its resolver naming the host's file
  /// after the default was used): the counters buffered for the file at `path` are carried
  /// to the file at the new path.
  Moved { counters: usize, path: PathBuf },
  /// No file is at the path: the counters were committed to the old file (`error`: they
  /// could not even be) — none of them is in a file at the path.
  Gone {
    counters: usize,
    path: PathBuf,
    error: Option<String>,
  },
}

/// How many times the background sweep tries a step, a second apart.
const SWEEP_TRIES: u32 = 60;

/// What one retention pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
  /// Counter rows deleted.
  pub deleted: usize,
  /// Totals rows rewritten by the reconciliation.
  pub totals_fixed: usize,
}

/// The engine's database location, its connection, and what was said about them.
#[derive(Default)]
pub struct Database {
  /// The path, and the thread that installed it (`None`: nobody, the default).
  source: Mutex<(PathSource, Option<std::thread::ThreadId>)>,
  /// Whether `source` is a resolver: read on every call, without the lock.
  resolver: AtomicBool,
  /// Problems with the resolver already reported (once per distinct problem).
  reported: Mutex<Vec<String>>,
  /// The connection (`None`: closed, opened by the next call that needs it).
  conn: Mutex<Option<SqliteDb>>,
  /// Whether `conn` holds a connection, readable without its lock.
  open: AtomicBool,
  /// Whether the resolver has named no path since it was installed: until it does, the
  /// default is used and it is asked again (binding/host.rs, at most every 100 ms).
  awaiting_path: AtomicBool,
  /// How the connection is opened (the busy timeout).
  options: OpenOptions,
  /// Records taken from a replaced file's connection, for the next connection at the path.
  carried: Mutex<Option<PendingWrites>>,
  /// File changes not logged yet; `has_changes` says whether there are any, without the
  /// lock (asked on every call).
  changes: Mutex<Vec<FileChange>>,
  has_changes: AtomicBool,
  /// Whether the retention sweep's thread was started.
  sweeping: AtomicBool,
  /// Set by the exit's close: a connection opened after it is closed at teardown too.
  pub exiting: AtomicBool,
  /// Each file the connection was opened at, as its folder and its name there: the same
  /// file however the path names it (relative, absolute, through a link).
  opened_in: Mutex<std::collections::HashSet<(FolderId, std::ffi::OsString)>>,
  /// Since when the file has been missing or empty where the connection had it.
  missing_since: Mutex<Option<std::time::Instant>>,
  /// The last open that failed, while no open has succeeded since.
  failed_open: Mutex<Option<FailedOpen>>,
}

/// Refuses to open `path` while a connection of this process (the host's) uses a `-wal` or
/// `-shm` other than those SQLite would attach: another file was renamed over its file, or
/// it has the file open in WAL mode (holding both sidecars) while they were removed or
/// moved away. It ends when that connection closes. Files are told apart by device and
/// inode, the engine's parked descriptors aside; sidecars are looked for where SQLite puts
/// them, beside the file a link leads to.
fn refuse_foreign_sidecars(path: &Path) -> Result<()> {
  let open = |file: &Path| file_id(file).and_then(locks::open_elsewhere) == Some(true);
  let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
  let [wal, shm] = [wal_path(&real), shm_path(&real)].map(|sidecar| open(&sidecar));
  let why = match open(path) {
    false if wal || shm => "is not the file whose -wal and -shm a connection of this process uses",
    true if !(wal && shm) && in_wal_mode(&real) => {
      "is open in this process, but not the -wal and -shm at its path (removed or moved away)"
    }
    _ => return Ok(()),
  };
  Err(QuotaError::Store(format!(
    "{} {why}; the engine opens it once that connection closes: decisions allow, and records \
     made meanwhile are not counted, until then",
    path.display()
  )))
}

/// Whether the header of `path`, open in the process, says WAL (read and write versions 2).
fn in_wal_mode(path: &Path) -> bool {
  let head = file_id(path).and_then(locks::read_head::<20>);
  head.is_some_and(|head| head[18..20] == [2, 2])
}

/// An open that failed: where, what was there just before it, when, and why.
struct FailedOpen {
  path: PathBuf,
  seen: Seen,
  at: std::time::Instant,
  error: QuotaError,
}

/// The file, which WAL is beside it (a host reopening after a restore makes a new one;
/// the engine's own try only writes to it) and its folder: which one, and its owner and
/// mode (a `chmod` fixing it), not its times (which the engine's own try changes, making
/// and removing the WAL when nothing else has the file open).
type Seen = (
  Option<FileStamp>,
  Option<FileId>,
  Option<(FolderId, u32, u32, u32)>,
);

/// A file as `stat` shows it: its id, size, and modification and change times. A restore,
/// a copy growing, a checkpoint or a `chmod` changes it.
type FileStamp = (
  Option<FileId>,
  u64,
  Option<std::time::SystemTime>,
  (i64, i64),
);

/// `folder` (the folder of `path`) with its owner and mode.
fn folder_stamp(path: &Path, folder: Option<FolderId>) -> Option<(FolderId, u32, u32, u32)> {
  let meta = std::fs::metadata(folder_of(path)).ok()?;
  #[cfg(unix)]
  let access = {
    use std::os::unix::fs::MetadataExt;
    (meta.uid(), meta.gid(), meta.mode())
  };
  #[cfg(not(unix))]
  let access = (0, 0, u32::from(meta.permissions().readonly()));
  Some((folder?, access.0, access.1, access.2))
}

fn file_stamp(path: &Path) -> Option<FileStamp> {
  let meta = std::fs::metadata(path).ok()?;
  #[cfg(unix)]
  let (id, changed) = {
    use std::os::unix::fs::MetadataExt;
    (
      Some((meta.dev(), meta.ino())),
      (meta.ctime(), meta.ctime_nsec()),
    )
  };
  #[cfg(not(unix))]
  let (id, changed) = (None, (0, 0));
  Some((id, meta.len(), meta.modified().ok(), changed))
}

/// A folder: its file id and, where the file system keeps one, its birth time (a folder
/// removed and made again often gets the same inode number back).
type FolderId = (FileId, Option<std::time::SystemTime>);

/// The folder holding `path`.
fn folder_id(path: &Path) -> Option<FolderId> {
  let folder = folder_of(path);
  let born = std::fs::metadata(folder).and_then(|m| m.created()).ok();
  Some((file_id(folder)?, born))
}

fn folder_of(path: &Path) -> &Path {
  let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
  folder.unwrap_or(Path::new("."))
}

/// The default location: `$DATA_DIR/storage.sqlite`, or the host's default data dir.
pub fn default_path() -> PathBuf {
  default_db_path(&process_env)
}

impl Database {
  /// A database opened with `options` (the default path until [`Database::set_source`]).
  pub fn with_options(options: OpenOptions) -> Self {
    Database {
      options,
      ..Database::default()
    }
  }

  /// Sets how the path is given, for every thread, from thread `by`; a connection open at
  /// another file is closed, and the next call opens the file at the new path. A thread
  /// that gives no path (the default) does not undo a path another thread installed — a
  /// worker calling `installHost({ logger })` keeps the process on the main thread's file.
  /// Returns whether the setting changed.
  pub fn set_source(&self, source: PathSource, by: std::thread::ThreadId) -> bool {
    let mut slot = relock(&self.source);
    if source == PathSource::Default && slot.1.is_some_and(|owner| owner != by) {
      return false;
    }
    self.resolver.store(
      matches!(source, PathSource::Resolver { .. }),
      Ordering::Release,
    );
    let owner = (source != PathSource::Default).then_some(by);
    let resolver = matches!(source, PathSource::Resolver { .. });
    *slot = (source, owner);
    drop(slot);
    self.awaiting_path.store(resolver, Ordering::Release);
    // A resolver's answer is followed when it gives one (`resolved`).
    if !resolver {
      self.follow_path();
    }
    true
  }

  /// Whether the path comes from a resolver function (no lock: read on every call).
  pub fn has_resolver(&self) -> bool {
    self.resolver.load(Ordering::Acquire)
  }

  /// Whether the resolver in use is the one `thread` installed: a thread whose resolver
  /// was replaced by a later `installHost` on another thread follows that one's answers.
  pub fn resolves_on(&self, thread: std::thread::ThreadId) -> bool {
    let source = relock(&self.source);
    matches!(source.0, PathSource::Resolver { .. }) && source.1 == Some(thread)
  }

  /// What the resolver returned: a path (kept as the process's), or a problem — reported
  /// once per distinct problem, naming the fallback — after which the last good path, or
  /// the default, is used.
  pub fn resolved(&self, logs: &LogQueue, answer: std::result::Result<String, String>) {
    let mut source = relock(&self.source);
    let PathSource::Resolver { last } = &mut source.0 else {
      return;
    };
    match answer {
      Ok(path) if !path.is_empty() => {
        self.awaiting_path.store(false, Ordering::Release);
        let path = Some(PathBuf::from(path));
        if *last != path {
          *last = path;
          drop(source);
          self.follow_path();
        }
      }
      Ok(_) => self.report(logs, "returned an empty string".to_string(), last.clone()),
      Err(problem) => self.report(logs, problem, last.clone()),
    }
  }

  /// Whether the resolver has named no path yet (the default is used meanwhile).
  pub fn awaits_path(&self) -> bool {
    self.awaiting_path.load(Ordering::Acquire)
  }

  /// After the path setting changed: retires a connection open at another file than the
  /// one at the path now, so the next call opens that one; its buffered records are
  /// carried there. The same file under another name keeps its connection.
  fn follow_path(&self) {
    let path = self.path();
    let mut slot = self.lock();
    let elsewhere = |db: &mut SqliteDb| {
      let file = file_id(db.path());
      db.path() != path && (file.is_none() || file != file_id(&path))
    };
    let Some(stale) = slot.take_if(elsewhere) else {
      return;
    };
    self.open.store(false, Ordering::Release);
    let counters = stale.pending_count();
    if counters > 0 {
      self.carry(stale.take_pending());
      self.note(FileChange::Moved {
        counters,
        path: stale.path().to_path_buf(),
      });
    }
    let _ = stale.close();
  }

  fn report(&self, logs: &LogQueue, problem: String, last: Option<PathBuf>) {
    let mut reported = relock(&self.reported);
    if reported.contains(&problem) {
      return;
    }
    if reported.len() > 100 {
      reported.clear();
    }
    reported.push(problem.clone());
    let fallback = last.unwrap_or_else(default_path);
    logs.warn(
      "quota:store",
      format!(
        "installHost dbPath resolver {problem}; using {}",
        fallback.display()
      ),
      None,
    );
  }

  /// The path to open now.
  pub fn path(&self) -> PathBuf {
    match &relock(&self.source).0 {
      PathSource::Default | PathSource::Resolver { last: None } => default_path(),
      PathSource::Fixed(path) | PathSource::Resolver { last: Some(path) } => path.clone(),
    }
  }

  /// Whether the connection is open (a hint: another thread may change it at any moment).
  pub fn is_open(&self) -> bool {
    self.open.load(Ordering::Acquire)
  }

  /// Whether the next call opens the database: it is closed, or (checked only with a
  /// resolver, whose path must be known before the connection's lock is taken) its file was
  /// deleted or replaced (`with_open` then closes it). The check commits nothing.
  pub fn needs_open(&self) -> bool {
    !self.is_open() || (self.has_resolver() && self.with_open(Access::Hot, |_| Ok(())).is_none())
  }

  /// [`Database::needs_open`] with the path looked up now, as the store call after it
  /// does (`Access::Full`).
  pub fn needs_open_now(&self) -> bool {
    !self.is_open()
      || (self.has_resolver() && self.retire_if(&mut self.lock(), SqliteDb::file_replaced_now))
  }

  fn lock(&self) -> MutexGuard<'_, Option<SqliteDb>> {
    self.conn.lock().unwrap_or_else(|poisoned| {
      // A panic inside a caller's closure: any transaction guard rolled back on unwind;
      // make sure, and go on with the connection.
      self.conn.clear_poison();
      let guard = poisoned.into_inner();
      if let Some(db) = guard.as_ref() {
        db.roll_back_abandoned();
      }
      guard
    })
  }

  /// Runs `f` on the connection, opening it first when needed at [`Database::path`].
  /// Holds the connection's mutex for the duration of `f`: keep `f` short, and do not
  /// reach the database from inside it (the mutex is not reentrant). Returns whether this
  /// call opened it.
  pub fn run<T>(
    &self,
    access: Access,
    f: impl FnOnce(&mut SqliteDb) -> Result<T>,
  ) -> (Result<T>, bool) {
    let mut slot = self.lock();
    if let Some(replaced) = access.file_check() {
      self.retire_if(&mut slot, replaced);
    }
    let opened = slot.is_none();
    if opened {
      let path = self.path();
      let folder = folder_id(&path);
      let db = match self.open_unless_failed(&path, folder) {
        Ok(db) => db,
        Err(err) => return (Err(err), true),
      };
      if let (Some(folder), Some(name)) = (folder, path.file_name()) {
        relock(&self.opened_in).insert((folder, name.to_owned()));
      }
      if let Some(carried) = relock(&self.carried).take() {
        db.adopt_pending(carried);
      }
      *slot = Some(db);
      self.open.store(true, Ordering::Release);
    }
    let Some(db) = slot.as_mut() else {
      unreachable!("opened above")
    };
    if access == Access::Full {
      db.flush_before_use();
    }
    (f(db), opened)
  }

  /// Opens `path`, unless its last open failed less than [`RETRY_AFTER_FAILURE`] ago and
  /// neither the file, its WAL nor its folder has changed since: then that error again,
  /// for a few `stat`s. A file that cannot be migrated (another schema, a folder it cannot
  /// write in) would otherwise cost every call a whole open and migration on the host's
  /// event loop (0.7 ms a call measured).
  fn open_unless_failed(&self, path: &Path, folder: Option<FolderId>) -> Result<SqliteDb> {
    let seen = (
      file_stamp(path),
      file_id(&wal_path(path)),
      folder_stamp(path, folder),
    );
    let mut failed = relock(&self.failed_open);
    if let Some(last) = failed.as_ref() {
      if last.path == path && last.seen == seen && last.at.elapsed() < RETRY_AFTER_FAILURE {
        return Err(last.error.clone());
      }
    }
    // A refusal costs a `stat` or two, and ends when the restore does: not remembered.
    let options = self.refuse_mid_restore(path, folder.as_ref())?;
    locks::sweep_parked();
    #[cfg(feature = "test-hooks")]
    super::test_hooks::OPENS.fetch_add(1, Ordering::Relaxed);
    // A refusal for another file's sidecars is remembered as a failed open: its check
    // lists the process's descriptors.
    let opened = refuse_foreign_sidecars(path).and_then(|()| SqliteDb::open(path, &options));
    // Another connection's lock (SQLITE_BUSY) ends leaving no trace on the file: each call
    // waits for it again, as any write does, rather than fail while it may be gone.
    let locked = |error: &&QuotaError| error.to_string().contains("database is locked");
    *failed = opened
      .as_ref()
      .err()
      .filter(|e| !locked(e))
      .map(|error| FailedOpen {
        path: path.to_path_buf(),
        seen,
        at: std::time::Instant::now(),
        error: error.clone(),
      });
    opened
  }

  /// Refuses to open `path` while its file is missing or empty in `folder`, where the
  /// connection had it: the host's restore unlinks the file and its sidecars, then copies
  /// a backup in (from an empty file), and a database (and a WAL) made in between would be
  /// replayed onto the backup. Until the file is back a call fails: a decision allows,
  /// records already buffered are carried to it, one made meanwhile is not counted. A new
  /// folder at the path (a test's reset), or a file missing longer than any restore takes
  /// (`restore_grace`), is a fresh start. The options it returns make the open check the
  /// same on its own descriptor, as the path may change in between.
  fn refuse_mid_restore(&self, path: &Path, folder: Option<&FolderId>) -> Result<OpenOptions> {
    let mut had_it_here = (folder.zip(path.file_name()))
      .is_some_and(|(folder, name)| relock(&self.opened_in).contains(&(*folder, name.to_owned())));
    let missing = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
    let mut since = relock(&self.missing_since);
    if !(had_it_here && missing) {
      *since = None;
    } else if since.get_or_insert_with(std::time::Instant::now).elapsed()
      >= self.options.restore_grace
    {
      // Missing for longer than any restore: deleted for good, a fresh start.
      had_it_here = false;
    } else {
      return Err(QuotaError::Store(format!(
        "{} is missing or empty where the engine had it open; no new database is made \
         there (a restore puts the file back): decisions allow, and records made meanwhile \
         are not counted, until it is back",
        path.display()
      )));
    }
    Ok(OpenOptions {
      existing: had_it_here,
      ..self.options.clone()
    })
  }

  /// Runs `f` only if the connection is open (never opens it): `None` otherwise. For
  /// background work, which must not create a database the host has not asked for.
  /// Buffered records are committed first with [`Access::Full`].
  pub fn with_open<T>(
    &self,
    access: Access,
    f: impl FnOnce(&mut SqliteDb) -> Result<T>,
  ) -> Option<Result<T>> {
    let mut slot = self.lock();
    let replaced = access.file_check().unwrap_or(SqliteDb::file_replaced);
    if self.retire_if(&mut slot, replaced) {
      return None;
    }
    let db = slot.as_mut()?;
    if access == Access::Full {
      db.flush_before_use();
    }
    Some(f(db))
  }

  /// Before buffered records are committed: looks the path up now (not at most every
  /// 100 ms, as the per-call check does) and retires a connection whose file is no longer
  /// the one at the path.
  pub fn recheck_file(&self) {
    self.retire_if(&mut self.lock(), SqliteDb::file_replaced_now);
  }

  /// `closeQuotaDb()`: closes the connection (statements and cached rows go with it; the
  /// next call reopens, even a file whose open just failed), safe while the host still has
  /// the file open (the close hook parks the descriptors). Returns what it could not commit
  /// of the buffered records.
  pub fn close(&self) -> Result<Option<Dropped>> {
    *relock(&self.failed_open) = None;
    let closed = {
      let mut slot = self.lock();
      self.open.store(false, Ordering::Release);
      match slot.take() {
        Some(stale) if stale.file_replaced_now() => {
          self.retire(stale);
          None
        }
        db => db.map(SqliteDb::close),
      }
    };
    locks::sweep_parked();
    closed.unwrap_or(Ok(None))
  }

  /// The file changes noticed since the last call (for the engine to log).
  pub fn take_file_changes(&self) -> Vec<FileChange> {
    if !self.has_changes.load(Ordering::Acquire) {
      return Vec::new();
    }
    let mut changes = relock(&self.changes);
    self.has_changes.store(false, Ordering::Release);
    std::mem::take(&mut *changes)
  }

  /// Buffered counters carried from a replaced file, waiting for the next open.
  pub fn carried_count(&self) -> usize {
    relock(&self.carried).as_ref().map_or(0, PendingWrites::len)
  }

  fn note(&self, change: FileChange) {
    relock(&self.changes).push(change);
    self.has_changes.store(true, Ordering::Release);
  }

  /// Retires the connection in `slot` if `replaced` says its file is no longer the one at
  /// the path; whether it did.
  fn retire_if(&self, slot: &mut Option<SqliteDb>, replaced: fn(&SqliteDb) -> bool) -> bool {
    let replaced = |db: &mut SqliteDb| {
      #[cfg(feature = "test-hooks")]
      super::test_hooks::FILE_CHECKS.fetch_add(1, Ordering::Relaxed);
      replaced(db)
    };
    match slot.take_if(replaced) {
      Some(stale) => {
        self.retire(stale);
        true
      }
      None => false,
    }
  }

  /// Closes a connection whose file is no longer the one at its path (see the module
  /// documentation for where its buffered records go).
  fn retire(&self, stale: SqliteDb) {
    self.open.store(false, Ordering::Release);
    let counters = stale.pending_count();
    if counters == 0 {
      let _ = stale.close();
      return;
    }
    let path = stale.path().to_path_buf();
    if file_id(&path).is_some() {
      self.carry(stale.take_pending());
      let _ = stale.close();
      self.note(FileChange::Carried { counters, path });
    } else {
      let error = match stale.close() {
        Ok(None) => None,
        Ok(Some(dropped)) => Some(dropped.error),
        Err(err) => Some(err.to_string()),
      };
      self.note(FileChange::Gone {
        counters,
        path,
        error,
      });
    }
  }

  /// Keeps `pending` for the next connection.
  fn carry(&self, pending: PendingWrites) {
    let mut carried = relock(&self.carried);
    match carried.as_mut() {
      Some(earlier) => earlier.merge(pending),
      None => *carried = Some(pending),
    }
  }

  /// One retention pass (docs/contract.md §4): deletes counter rows older than
  /// `retention_days`, reconciles the pool totals; `None` when the connection is closed
  /// (the sweep never opens it). Each chunk takes the mutex separately: requests interleave.
  pub fn sweep(&self, retention_days: f64, now_ms: i64) -> Option<Result<SweepReport>> {
    self.sweep_open(retention_days, now_ms, false).transpose()
  }

  /// [`Database::sweep`], `Ok(None)` when the connection is not open. `brief` (the
  /// background sweep): each step waits only briefly for another connection's write lock
  /// and is retried a second later, up to a minute, so no call of the host's waits long
  /// behind it for the connection.
  fn sweep_open(
    &self,
    retention_days: f64,
    now_ms: i64,
    brief: bool,
  ) -> Result<Option<SweepReport>> {
    let cutoff = retention_cutoff(retention_days, now_ms)?;
    let mut report = SweepReport::default();
    // Reserve admission's reservations past their expiry (docs/admission.md).
    if self
      .sweep_step(brief, |db| db.gc_reservations(now_ms))?
      .is_none()
    {
      return Ok(None);
    }
    loop {
      let Some(deleted) = self.sweep_step(brief, |db| db.gc_chunk(cutoff, GC_CHUNK))? else {
        return Ok(None);
      };
      report.deleted += deleted;
      if deleted < GC_CHUNK {
        break;
      }
    }
    let mut cursor: Option<TotalsCursor> = None;
    loop {
      let batch = self.sweep_step(brief, |db| {
        db.reconcile_totals_batch(cursor.as_ref(), RECONCILE_BATCH)
      })?;
      let Some((fixed, next)) = batch else {
        break;
      };
      report.totals_fixed += fixed;
      cursor = next;
      if cursor.is_none() {
        break;
      }
    }
    Ok(Some(report))
  }

  /// One step of the sweep on the open connection; `brief`: with a short wait for the
  /// write lock, tried again a second later up to [`SWEEP_TRIES`] times.
  fn sweep_step<T>(&self, brief: bool, f: impl Fn(&SqliteDb) -> Result<T>) -> Result<Option<T>> {
    let mut tries = 1;
    loop {
      match self.on_open(|db| if brief { db.briefly(&f) } else { f(db) }) {
        Err(_) if brief && tries < SWEEP_TRIES => std::thread::sleep(Duration::from_secs(1)),
        outcome => return outcome,
      }
      tries += 1;
    }
  }

  /// `f` on the open connection, buffered records committed first; `Ok(None)` when closed.
  fn on_open<T>(&self, f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Result<Option<T>> {
    self.with_open(Access::Full, f).transpose()
  }

  /// Starts the retention sweep's thread once (`false` after): a detached thread, which
  /// never keeps Node's event loop alive, running `pass` every `interval`.
  pub fn spawn_sweeper(
    &'static self,
    interval: Duration,
    pass: impl Fn() + Send + 'static,
  ) -> bool {
    if self.sweeping.swap(true, Ordering::SeqCst) {
      return false;
    }
    let spawned = std::thread::Builder::new()
      .name("quota-retention".into())
      .spawn(move || loop {
        std::thread::sleep(interval);
        pass();
      });
    if spawned.is_err() {
      self.sweeping.store(false, Ordering::SeqCst);
      return false;
    }
    true
  }

  /// One pass of the background retention sweep ([`Database::sweep_open`], `brief`).
  pub fn sweep_briefly(&self, retention_days: f64, now_ms: i64) -> Option<Result<SweepReport>> {
    self.sweep_open(retention_days, now_ms, true).transpose()
  }

  /// `quota-engine doctor`'s read-only look at the database at `path`: through the open
  /// connection when it is that file, else through a read-only connection of its own.
  pub fn inspect(&self, path: &Path) -> Result<DatabaseInspection> {
    if let Some(found) = self.with_open(Access::Full, |db| inspect_open(db, path)) {
      if let Some(found) = found? {
        return Ok(found);
      }
    }
    inspect_path(path)
  }
}

/// The SQLite driver ([`QuotaDriver`]): the counters in the host's `storage.sqlite`, on the
/// engine's connection (which it holds nothing of: either driver's metadata lives there).
/// Every operation answers at once on the calling thread (docs/sqlite.md).
#[derive(Debug, Clone, Copy, Default)]
pub struct SqliteDriver;

impl QuotaDriver for SqliteDriver {
  fn name(&self) -> &'static str {
    "sqlite"
  }

  fn url(&self) -> Option<&str> {
    None
  }

  fn enforce(
    &self,
    engine: &'static Engine,
    call: &EnforceCall,
    threshold: f64,
    reserve: bool,
  ) -> Step<Enforced> {
    let outcome = engine.with_decision_db(call, |db| {
      let request = call.ids.request();
      let saturation = engine.saturation();
      let lookup = DecisionLookup::new(&saturation, call.now_ms);
      // Waits only briefly for another connection's write lock (the JS thread waits with
      // it), and not again for a second after failing; without the lock the decision is
      // made as in default mode, unreserved.
      if reserve
        && !engine
          .faults
          .failed_within(Operation::Reserve, RESERVE_RETRY)
      {
        let estimate = estimated_cost(call.estimated_usd, call.estimated_tokens);
        let reserved = db.briefly(|db| {
          let id = new_reservation_id();
          db.enforce_reserving(&lookup, &request, threshold, &estimate, id, call.now_ms)
        });
        match reserved {
          Ok((outcome, reservation)) => {
            // Only a reservation shows the write lock was had: the early decisions (no
            // pool, no limit) never take it.
            if reservation.is_some() {
              engine.faults.succeeded(&engine.logs, Operation::Reserve);
            }
            return Ok((outcome, reservation.map(|r| r.token())));
          }
          Err(err) => engine.faults.failed(
            &engine.logs,
            Operation::Reserve,
            "quota reservation failed; deciding without one",
            &err.to_string(),
            vec![("apiKeyId", LogValue::Text(call.ids.api_key_id.clone()))],
          ),
        }
        engine.metrics.store_error(Operation::Enforce);
      }
      db.hot_scope(|db| enforce(db, &lookup, &request, threshold, call.now_ms))
        .map(|outcome| (outcome, None))
    });
    Step::Now(outcome)
  }

  fn record(&self, engine: &'static Engine, call: &RecordCall) -> Step<(Written, Buffered)> {
    let max_age = engine.flush_age();
    let result = engine.with_buffer_db(|db| {
      let writes = db.hot_scope(|db| consumption_writes(db, &call.ids.request(), &call.cost))?;
      db.record_writes(&call.ids.api_key_id, &writes, call.now_ms, max_age)
    });
    if matches!(result, Ok(Recorded::FileReplaced)) {
      // Retired at once, so the records after this one go to the file now at the path.
      engine.database.recheck_file();
      engine.report_file_changes();
    }
    Step::Now(match result {
      Ok(recorded) => (
        Written::Done,
        matches!(recorded, Recorded::Buffered | Recorded::FileReplaced),
      ),
      // A record that could not be committed stays buffered, for the next flush.
      Err(err) => (Written::Failed(err), true),
    })
  }

  fn settle(&self, engine: &'static Engine, settle: &Settle) -> Step<Settled> {
    // Checked as its reservation's decision was (`Access::Hot`): both go to one file.
    Step::Now(engine.with_hot_db(|db| {
      db.settle_reservation(
        &settle.token,
        settle.api_key_id.as_deref(),
        settle.deltas(),
        settle.now_ms,
      )
    }))
  }

  fn consume(&self, engine: &'static Engine, at: CounterAt, cost: f64) -> Step<Result<f64>> {
    let max_age = engine.flush_age();
    let consume =
      |db: &mut SqliteDb| db.consume_buffered(&at.api_key_id, &at.key, cost, at.now_ms, max_age);
    Step::Now(engine.with_hot_db(consume))
  }

  fn peek(&self, engine: &'static Engine, at: CounterAt) -> Step<Result<f64>> {
    let peek = |db: &SqliteDb| db.peek(&at.api_key_id, &at.key, at.now_ms);
    Step::Now(engine.with_hot_db(|db| db.hot_scope(peek)))
  }

  fn pool_consumed_total(
    &self,
    engine: &'static Engine,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    Step::Now(engine.with_hot_db(|db| db.hot_scope(|db| db.pool_consumed_total(&key, now_ms))))
  }

  fn clear(&self, engine: &'static Engine, at: CounterAt) -> Step<Result<()>> {
    Step::Now(engine.with_db(|db| db.clear(&at.api_key_id, &at.key)))
  }

  fn pool_usage(
    &self,
    engine: &'static Engine,
    pool_id: String,
    dims: Vec<PlanDimension>,
    now_ms: i64,
  ) -> Step<Result<PoolUsageSnapshot>> {
    Step::Now(engine.with_db(|db| db.pool_usage_with_dimensions(&pool_id, &dims, now_ms)))
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn each_engine_has_its_own_connection_and_backends() {
    let a: &'static Engine = Box::leak(Box::default());
    let b: &'static Engine = Box::leak(Box::default());
    let dir = tempfile::tempdir().unwrap();
    let me = std::thread::current().id();
    for (engine, name) in [(a, "a.sqlite"), (b, "b.sqlite")] {
      engine
        .database
        .set_source(PathSource::Fixed(dir.path().join(name)), me);
    }
    let path = |engine: &'static Engine| engine.with_db(|db| Ok(db.path().to_path_buf()));
    assert_eq!(path(a).unwrap(), dir.path().join("a.sqlite"));
    assert_eq!(path(b).unwrap(), dir.path().join("b.sqlite"));
    a.close_db().unwrap();
    assert!(!a.database.is_open() && b.database.is_open());
    let url = "redis://127.0.0.1:1/15";
    let (x, y) = (a.redis_backend(url).unwrap(), b.redis_backend(url).unwrap());
    assert!(!std::sync::Arc::ptr_eq(&x, &y));
    assert!(std::sync::Arc::ptr_eq(&x, &a.redis_backend(url).unwrap()));
    b.close_db().unwrap();
  }

  #[test]
  fn a_resolver_problem_is_reported_once_and_names_the_fallback() {
    let logs = LogQueue::default();
    let db = Database::default();
    let me = std::thread::current().id();
    db.set_source(PathSource::Resolver { last: None }, me);
    db.resolved(&logs, Err("threw: boom".into()));
    db.resolved(&logs, Err("threw: boom".into()));
    let warned = logs.take().unwrap();
    assert_eq!(warned.len(), 1);
    assert!(
      warned[0].msg.contains("threw: boom; using "),
      "{}",
      warned[0].msg
    );
    db.resolved(&logs, Ok("/tmp/x/storage.sqlite".into()));
    assert_eq!(db.path(), PathBuf::from("/tmp/x/storage.sqlite"));
    db.resolved(&logs, Err("returned a number".into()));
    assert!(logs.take().unwrap()[0]
      .msg
      .contains("using /tmp/x/storage.sqlite"));
    assert_eq!(db.path(), PathBuf::from("/tmp/x/storage.sqlite"));
    db.set_source(PathSource::Fixed("/a/b".into()), me);
    assert_eq!(db.path(), PathBuf::from("/a/b"));
    assert!(!db.has_resolver());
    // Another thread that installs no path keeps this one; it may install its own.
    let other = std::thread::spawn(|| std::thread::current().id())
      .join()
      .unwrap();
    assert!(!db.set_source(PathSource::Default, other));
    assert_eq!(db.path(), PathBuf::from("/a/b"));
    assert!(db.set_source(PathSource::Fixed("/c".into()), other));
    assert!(db.set_source(PathSource::Default, other));
    assert!(db.set_source(PathSource::Default, me));
  }
}
