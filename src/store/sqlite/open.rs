//! Opening the database: the lock hooks first, then the pragmas the host uses, the
//! migrations, and the lock self-test.

use super::cache::MetadataCache;
use super::locks::{self, LockCheck};
use super::{migrations, SqliteDb, StoreContext};
use crate::error::{QuotaError, Result};
use rusqlite::{ffi, Connection, OpenFlags, MAIN_DB};
use std::cell::RefCell;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// How to open the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenOptions {
  /// How long a statement waits for another connection's lock before failing with
  /// `SQLITE_BUSY` (the host uses 2000 ms).
  pub busy_timeout: Duration,
  /// Open only a file that is there and not empty: where the engine had the file before,
  /// a missing or empty one is a restore under way (engine/database.rs).
  pub existing: bool,
  /// How long such a file is taken for a restore under way: after that, one still missing
  /// or empty was deleted for good, and the engine starts afresh there.
  pub restore_grace: Duration,
}

impl Default for OpenOptions {
  fn default() -> Self {
    OpenOptions {
      busy_timeout: Duration::from_millis(2000),
      existing: false,
      restore_grace: Duration::from_secs(10),
    }
  }
}

/// What [`SqliteDb::open`] found; [`OpenReport::warnings`] says what to log (once).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenReport {
  pub path: PathBuf,
  /// The SQLite version the engine runs (its bundled copy).
  pub sqlite_version: String,
  /// The library in use is the one this crate was compiled against (the bundled copy).
  pub bundled: bool,
  /// The lock self-test (see `locks.rs`).
  pub locks: LockCheck,
  /// `PRAGMA journal_mode` after asking for WAL.
  pub journal_mode: String,
  /// Whether opening created any missing table, index or trigger.
  pub migrated: bool,
}

impl OpenReport {
  /// Conditions a caller should log once: the lock hook not in effect (or not available on
  /// this Unix platform), a journal mode other than WAL, a SQLite other than the
  /// bundled one.
  pub fn warnings(&self) -> Vec<String> {
    let mut out = Vec::new();
    if let LockCheck::NotLive(why) = &self.locks {
      out.push(format!(
        "SQLite lock hook not in effect ({why}): decisions from memory are off; when the \
         hook runs but its locks are not seen, the engine refuses to lock the host's file \
         rather than take the process's classic POSIX locks (its calls then fail open: use \
         the Redis store on this machine)"
      ));
    }
    if self.locks == LockCheck::Unsupported && cfg!(unix) {
      out.push(
        "no open-file-description locks on this platform (neither Linux nor macOS): the engine's locks are the \
         process's classic POSIX locks, and sharing the database with another SQLite copy \
         in this process (the host's) is not safe from lock interference"
          .to_string(),
      );
    }
    if !self.journal_mode.eq_ignore_ascii_case("wal") {
      out.push(format!(
        "journal_mode is {:?}, not \"wal\"; the host and the engine may block each other",
        self.journal_mode
      ));
    }
    if !self.bundled {
      out.push(format!(
        "SQLite {} is not the bundled library this engine was built with",
        self.sqlite_version
      ));
    }
    out
  }
}

/// `(st_dev, st_ino)`: which file a path names right now.
pub(crate) type FileId = (u64, u64);

/// The WAL beside the database file at `path`.
pub(crate) fn wal_path(path: &Path) -> PathBuf {
  sidecar(path, "-wal")
}

/// The `-shm` (the wal-index) beside the database file at `path`.
pub(crate) fn shm_path(path: &Path) -> PathBuf {
  sidecar(path, "-shm")
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
  let mut file = path.as_os_str().to_owned();
  file.push(suffix);
  PathBuf::from(file)
}

#[cfg(unix)]
pub(crate) fn file_id(path: &Path) -> Option<FileId> {
  use std::os::unix::fs::MetadataExt;
  // `stat` only: opening and closing the file would drop the host's locks.
  std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
pub(crate) fn file_id(_path: &Path) -> Option<FileId> {
  None
}

/// How often [`SqliteDb::file_replaced`] looks the path up when it can `fstat` instead.
const PATH_CHECK_EVERY: Duration = Duration::from_millis(100);

/// The descriptor of the connection's main database file: the `h` field of SQLite's
/// `unixFile`, which follows three pointers. Used only when an `fstat` of it finds the
/// very file just opened (`id`), so a different layout means no descriptor, not a wrong
/// one.
#[cfg(unix)]
fn main_descriptor(conn: &Connection, id: Option<FileId>) -> Option<std::os::raw::c_int> {
  let id = id?;
  let file = super::main_db_file(conn)?;
  // SAFETY: the read stays within the unix VFS's `unixFile` (far larger than four words),
  // live while the connection is; its result is only trusted after the check below.
  let fd = unsafe {
    *file
      .as_ptr()
      .cast::<u8>()
      .add(3 * std::mem::size_of::<*const ()>())
      .cast::<std::os::raw::c_int>()
  };
  (fd >= 0 && matches!(fstat_id(fd), Some((dev, ino, _)) if (dev, ino) == id)).then_some(fd)
}

#[cfg(not(unix))]
fn main_descriptor(_conn: &Connection, _id: Option<FileId>) -> Option<std::os::raw::c_int> {
  None
}

/// `(st_dev, st_ino, st_nlink)` of a descriptor.
#[cfg(unix)]
fn fstat_id(fd: std::os::raw::c_int) -> Option<(u64, u64, u64)> {
  // SAFETY: fstat writes into a zeroed stat buffer; a bad descriptor fails with EBADF.
  unsafe {
    let mut st: libc::stat = std::mem::zeroed();
    (raw_fstat(fd, &mut st) == 0).then_some((
      st.st_dev as u64,
      st.st_ino as u64,
      st.st_nlink as u64,
    ))
  }
}

/// `fstat` as the system call itself: glibc's `fstat` is `fstatat(fd, "", AT_EMPTY_PATH)`,
/// which makes the kernel copy and look up an empty path first — 40 % of the check's cost,
/// paid on every decision (docs/sqlite.md#one-connection-per-process).
///
/// # Safety
/// `st` must be writable; `fd` is only read.
#[cfg(all(
  target_os = "linux",
  any(target_arch = "x86_64", target_arch = "aarch64")
))]
unsafe fn raw_fstat(fd: std::os::raw::c_int, st: &mut libc::stat) -> std::os::raw::c_int {
  // SAFETY: the kernel's `struct stat` for these architectures is libc's `stat`.
  unsafe { libc::syscall(libc::SYS_fstat, fd, st as *mut libc::stat) as std::os::raw::c_int }
}

#[cfg(all(
  unix,
  not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
  ))
))]
unsafe fn raw_fstat(fd: std::os::raw::c_int, st: &mut libc::stat) -> std::os::raw::c_int {
  // SAFETY: as the caller's.
  unsafe { libc::fstat(fd, st) }
}

/// Whether the file on `fd` is a copy still being written (the host's restore copies its
/// backup in while the engine may open it): empty where a file was before (`existing`),
/// or, with no WAL beside it (a restore unlinks it first; a checkpoint held back by a
/// reader leaves the file short of its header while the WAL holds the rest), shorter than
/// a header or than the pages its header vouches for, which SQLite would read as zeros.
/// Read through the connection's own descriptor: one opened and closed here would drop
/// the host's locks.
#[cfg(unix)]
fn being_written(fd: std::os::raw::c_int, existing: bool, wal: &Path) -> bool {
  let mut header = [0u8; 100];
  // SAFETY: `fd` is the connection's open descriptor, only read: `pread` writes at most
  // `header.len()` bytes into `header`, `fstat` into a zeroed `stat`.
  let (read, len) = unsafe {
    let mut st: libc::stat = std::mem::zeroed();
    let read = libc::pread(fd, header.as_mut_ptr().cast(), header.len(), 0);
    (
      read,
      (raw_fstat(fd, &mut st) == 0).then_some(st.st_size as u64),
    )
  };
  match len {
    None => false,
    Some(0) => existing,
    Some(_) if std::fs::metadata(wal).is_ok_and(|m| m.len() > 0) => false,
    Some(_) if read != header.len() as isize => read >= 0,
    Some(len) => {
      let word = |at: usize| u32::from_be_bytes(header[at..at + 4].try_into().unwrap_or_default());
      let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n => u64::from(n),
      };
      let pages = u64::from(word(28));
      let vouched = header.starts_with(b"SQLite format 3\0") && pages > 0 && word(24) == word(92);
      vouched && len < pages * page_size
    }
  }
}

#[cfg(not(unix))]
fn being_written(_fd: std::os::raw::c_int, _existing: bool, _wal: &Path) -> bool {
  false
}

/// `journal_mode = WAL`, which opens the `-wal` and `-shm` by path: if the connection's
/// file went away before (the host's restore unlinks it first, the sidecars after), they
/// may be the restored file's, and the connection is given up before it writes or
/// checkpoints anything there (SQLite's own close checkpoints no moved file).
fn enter_wal(
  conn: &Connection,
  path: &Path,
  file: Option<FileId>,
  fd: Option<std::os::raw::c_int>,
) -> Result<String> {
  let journal_mode: String = conn
    .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
    .ctx("setting journal_mode")?;
  let in_memory = path.as_os_str().is_empty() || path == Path::new(":memory:");
  let gone = file.map_or(cfg!(unix) && !in_memory, |id| {
    fd.is_some_and(|fd| descriptor_unlinked(fd, id)) || file_id(path) != Some(id)
  });
  if gone {
    return Err(QuotaError::Store(format!(
      "{} went away while it was opened (a restore under way); the next call opens it again",
      path.display()
    )));
  }
  Ok(journal_mode)
}

/// Whether the file open on `fd` is no longer `id` or has no name left.
#[cfg(unix)]
fn descriptor_unlinked(fd: std::os::raw::c_int, id: FileId) -> bool {
  !matches!(fstat_id(fd), Some((dev, ino, links)) if (dev, ino) == id && links > 0)
}

#[cfg(not(unix))]
fn descriptor_unlinked(_fd: std::os::raw::c_int, _id: FileId) -> bool {
  false
}

/// Files this process has a [`SqliteDb`] for. Process-wide, not any engine's: POSIX locks
/// belong to the process, so a second connection to a file, whoever opens it, would release
/// the first one's locks (`locks.rs`).
static OPEN_FILES: Mutex<Option<HashSet<FileId>>> = Mutex::new(None);

fn with_open_files<T>(f: impl FnOnce(&mut HashSet<FileId>) -> T) -> T {
  let mut guard = OPEN_FILES.lock().unwrap_or_else(|e| e.into_inner());
  f(guard.get_or_insert_with(HashSet::new))
}

impl SqliteDb {
  /// Opens (creating it and its parent directory if needed) the database at `path`:
  /// installs the lock hooks (once per process), refuses a second connection to a file
  /// this process already has one to, sets `journal_mode = WAL`, `busy_timeout`,
  /// `synchronous = NORMAL`, `foreign_keys = ON`, applies the migrations and runs the
  /// lock self-test.
  pub fn open(path: &Path, options: &OpenOptions) -> Result<SqliteDb> {
    locks::install();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
      std::fs::create_dir_all(parent)
        .map_err(|e| QuotaError::Store(format!("creating the folder {}: {e}", parent.display())))?;
    }
    if let Some(id) = file_id(path) {
      if with_open_files(|open| open.contains(&id)) {
        return Err(QuotaError::Store(format!(
          "{} is already open in this process; the engine keeps one connection per file",
          path.display()
        )));
      }
    }
    let calls_before = locks::lock_calls();
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if !options.existing {
      flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let before = file_id(path);
    let conn =
      Connection::open_with_flags(path, flags).ctx(&format!("opening {}", path.display()))?;
    // SQLite opens a file it may not write read-only, without an error, and every record
    // would then fail until something reopened it: refused, the open is tried again, and
    // succeeds once the file is writable.
    if conn.is_readonly(MAIN_DB).unwrap_or(false) {
      return Err(QuotaError::Store(format!(
        "this process may not write {}: quota use cannot be recorded until it may",
        path.display()
      )));
    }
    // Right after the open, so a file replaced while the connection is set up is seen as
    // unlinked; nothing is written before the checks here and in `enter_wal`. A file
    // replaced during the open itself leaves it unknown which one the connection has.
    let file = file_id(path).filter(|id| before.is_none_or(|before| before == *id));
    let fd = main_descriptor(&conn, file);
    if fd.is_some_and(|fd| being_written(fd, options.existing, &wal_path(path))) {
      return Err(QuotaError::Store(format!(
        "{} is not whole yet (a restore is still copying it in); it is opened once whole",
        path.display()
      )));
    }
    conn
      .busy_timeout(options.busy_timeout)
      .ctx("setting busy_timeout")?;
    let journal_mode = enter_wal(&conn, path, file, fd)?;
    conn
      .execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
      .ctx("setting pragmas")?;
    conn.set_prepared_statement_cache_capacity(64);
    let migrated = migrations::ensure_schema(&conn)?;
    if let Some(id) = file {
      with_open_files(|open| open.insert(id));
    }
    let sqlite_version = rusqlite::version().to_string();
    let bundled = rusqlite::version_number() == ffi::SQLITE_VERSION_NUMBER;
    let mut db = SqliteDb {
      conn,
      path: path.to_path_buf(),
      file_id: file,
      report: OpenReport {
        path: path.to_path_buf(),
        sqlite_version,
        bundled,
        locks: LockCheck::LiveUnprobed,
        journal_mode,
        migrated,
      },
      fd,
      path_checked: std::cell::Cell::new(Some(std::time::Instant::now())),
      busy_timeout: options.busy_timeout,
      cache: RefCell::new(MetadataCache::default()),
      hot: RefCell::new(Default::default()),
      buffer: RefCell::new(Default::default()),
    };
    db.report.locks = db.self_test_locks(calls_before);
    Ok(db)
  }

  /// The lock self-test ([`locks::self_test`]) for this connection. Its probe asks about
  /// the `-shm` at the path, which is this connection's only while its file is still there.
  pub fn self_test_locks(&self, calls_before: u64) -> LockCheck {
    locks::self_test(&self.path, calls_before, || !self.file_replaced_now())
  }

  /// Closes the connection. Call it only when the host no longer needs the file, or the
  /// file was deleted: on Linux the close hook keeps the descriptors open (parked) while
  /// the host still has the file open, elsewhere closing drops the process's locks.
  /// Buffered records are committed first (waiting up to the busy timeout for a lock);
  /// those that cannot be (the file is gone, or locked longer) are dropped and reported.
  pub fn close(mut self) -> Result<Option<super::record_buffer::Dropped>> {
    let dropped = self
      .flush_pending(false)
      .err()
      .map(|err| super::record_buffer::Dropped {
        counters: self.pending_count(),
        error: err.to_string(),
      });
    self.discard_pending();
    self.hot.get_mut().wal.forget();
    // The WAL is emptied into the file first, without waiting, and kept when the path now
    // names another file (docs/sqlite.md#the-file-at-rest): a WAL left with frames would be
    // replayed onto whatever file is put at the path next.
    let _ = self.conn.busy_timeout(Duration::ZERO);
    let _ = self
      .conn
      .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    if self.file_replaced_now() {
      keep_wal_at_close(&self.conn);
    }
    self.forget_file();
    let conn = std::mem::replace(&mut self.conn, Connection::open_in_memory().ctx("closing")?);
    conn
      .close()
      .map_err(|(_, e)| QuotaError::Store(format!("closing: {e}")))?;
    Ok(dropped)
  }

  /// Whether the path now names another file than the one this connection has open (it
  /// was deleted, or deleted and recreated, or renamed away).
  ///
  /// Asked on every call, so cheaply: when the connection's own descriptor is known, an
  /// `fstat` of it (no path lookup) says at once whether the file was unlinked — deleted,
  /// its folder deleted, or replaced by a rename over it — and the path itself is looked
  /// up at most every [`PATH_CHECK_EVERY`], for a file renamed away with another put in
  /// its place. Without the descriptor, the path is looked up every time.
  pub fn file_replaced(&self) -> bool {
    self.check_file(false)
  }

  /// [`SqliteDb::file_replaced`] with the path always looked up (before a commit of
  /// buffered records, so none goes to a file renamed away a moment ago).
  pub fn file_replaced_now(&self) -> bool {
    self.check_file(true)
  }

  fn check_file(&self, look_up_path: bool) -> bool {
    let Some(id) = self.file_id else {
      return false;
    };
    if let Some(fd) = self.fd {
      if descriptor_unlinked(fd, id) {
        return true;
      }
      let recent = |checked: std::time::Instant| checked.elapsed() < PATH_CHECK_EVERY;
      if !look_up_path && self.path_checked.get().is_some_and(recent) {
        return false;
      }
    }
    let replaced = file_id(&self.path) != Some(id);
    // A replacement seen is looked up again by every later check, not 100 ms later.
    let checked = (!replaced).then(std::time::Instant::now);
    self.path_checked.set(checked);
    replaced
  }

  /// Whether [`SqliteDb::file_replaced`] can `fstat` the connection's own descriptor
  /// (diagnostics and tests).
  pub fn watches_descriptor(&self) -> bool {
    self.fd.is_some()
  }

  fn forget_file(&mut self) {
    if let Some(id) = self.file_id.take() {
      with_open_files(|open| open.remove(&id));
    }
  }
}

impl Drop for SqliteDb {
  fn drop(&mut self) {
    self.forget_file();
  }
}

/// `SQLITE_FCNTL_PERSIST_WAL = 1` on the main database: closing the last connection keeps
/// the WAL and `-shm` files instead of removing them by path. Best effort: a close goes on.
fn keep_wal_at_close(conn: &Connection) {
  let mut on: std::os::raw::c_int = 1;
  // SAFETY: the handle is live for the call; the argument is an int as documented.
  unsafe {
    ffi::sqlite3_file_control(
      conn.handle(),
      c"main".as_ptr(),
      ffi::SQLITE_FCNTL_PERSIST_WAL,
      (&mut on as *mut std::os::raw::c_int).cast(),
    )
  };
}

#[cfg(all(test, unix))]
mod tests {
  use super::*;

  /// The host's restore landing between the engine's open of the file and of its WAL: the
  /// connection is given up, and the restored file's WAL keeps the host's rows.
  #[test]
  fn a_file_gone_before_its_wal_leaves_the_new_files_wal_alone() {
    locks::install();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("storage.sqlite");
    let wal = "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;";
    let old = Connection::open(&path).unwrap();
    old
      .execute_batch(&format!("{wal} CREATE TABLE t(v);"))
      .unwrap();
    drop(old);
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let engine = Connection::open_with_flags(&path, flags).unwrap();
    let (file, fd) = (file_id(&path), main_descriptor(&engine, file_id(&path)));
    assert!(fd.is_some());
    for suffix in ["", "-wal", "-shm"] {
      let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let host = Connection::open(&path).unwrap();
    let restored = format!("{wal} CREATE TABLE restored(v); INSERT INTO restored VALUES (7);");
    host.execute_batch(&restored).unwrap();

    let err = enter_wal(&engine, &path, file, fd).unwrap_err();
    assert!(err.to_string().contains("went away"), "{err}");
    drop(engine);
    let reader = Connection::open(&path).unwrap();
    let row: i64 = reader
      .query_row("SELECT v FROM restored", [], |r| r.get(0))
      .unwrap();
    assert_eq!(row, 7);
  }
}
