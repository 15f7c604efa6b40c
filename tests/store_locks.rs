//! The lock hooks (docs/two-sqlites.md) on Linux and macOS: the engine's locks are
//! open-file-description locks, so the host's classic POSIX locks (taken here through raw
//! descriptors, like better-sqlite3's copy of SQLite would) exclude the engine, survive
//! the engine's activity, and survive the engine closing its connection.
#![cfg(any(
  target_os = "macos",
  all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
  )
))]
#![deny(clippy::undocumented_unsafe_blocks)]

mod store_support;

use omniroute_quota_engine::core::dimensions::{QuotaUnit, QuotaWindow};
use omniroute_quota_engine::error::QuotaError;
use omniroute_quota_engine::store::sqlite::{locks, LockCheck};
use omniroute_quota_engine::store::{OpenOptions, SqliteDb};
use std::ffi::CString;
use std::path::Path;
use std::sync::Mutex;
use store_support::*;

/// The tests here count parked descriptors: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// SQLite's lock bytes: the database file's SHARED range and the -shm's WAL write lock
/// and DMS bytes.
const SHARED_FIRST: i64 = 0x4000_0000 + 2;
const SHARED_SIZE: i64 = 510;
const SHM_WRITE: i64 = 120;
const SHM_DMS: i64 = 128;

/// A descriptor the "host" owns, like better-sqlite3's, closed on drop.
struct HostFd(libc::c_int);

impl HostFd {
  fn open(path: &Path) -> HostFd {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR) };
    assert!(fd >= 0, "open {}", path.display());
    HostFd(fd)
  }

  /// `kind` is `F_RDLCK`, `F_WRLCK` or `F_UNLCK` (a `c_int` on Linux, a `c_short` on macOS).
  fn flock(kind: impl Into<libc::c_int>, start: i64, len: i64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct of integers; all zero bytes is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind.into() as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    fl
  }

  /// A classic (process-owned) lock, as the host's SQLite takes them.
  fn classic_lock(&self, kind: impl Into<libc::c_int>, start: i64, len: i64) {
    let mut fl = Self::flock(kind, start, len);
    // SAFETY: F_SETLK reads `fl`, a live `flock`.
    let rc = unsafe { libc::fcntl(self.0, libc::F_SETLK, &mut fl) };
    assert_eq!(
      rc,
      0,
      "classic lock failed: {}",
      std::io::Error::last_os_error()
    );
  }

  /// Whether the process still holds a classic lock on the range: asked with an OFD
  /// query on this descriptor, which reports the process's classic locks as conflicts
  /// (different owners) but not this descriptor's own OFD locks (it has none).
  fn classic_lock_held(&self, start: i64, len: i64) -> bool {
    let mut fl = Self::flock(libc::F_WRLCK, start, len);
    // SAFETY: F_OFD_GETLK reads and fills `fl`, a live `flock`.
    let rc = unsafe { libc::fcntl(self.0, libc::F_OFD_GETLK, &mut fl) };
    assert_eq!(rc, 0);
    fl.l_type != libc::F_UNLCK as libc::c_short
  }
}

impl Drop for HostFd {
  fn drop(&mut self) {
    // SAFETY: `self.0` was opened by `HostFd::open`, is owned by this value alone and is
    // closed once, here.
    unsafe { libc::close(self.0) };
  }
}

fn shm_path(path: &Path) -> std::path::PathBuf {
  let mut shm = path.as_os_str().to_owned();
  shm.push("-shm");
  shm.into()
}

#[test]
fn the_hook_is_live_in_the_bundled_copy() {
  let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
  let status = locks::install();
  assert!(status.fcntl && status.close, "{status:?}");
  let (_dir, path, db) = temp_db();
  assert_eq!(db.open_report().locks, LockCheck::Live);
  assert!(db.open_report().bundled);
  // The engine holds its DMS read lock; a classic query from this process sees it, which
  // it would not if it were one of the process's own classic locks.
  assert_eq!(locks::probe_shm(&path), Some(true));
  let before = locks::lock_calls();
  db.consume(
    "k",
    &key("p", QuotaUnit::Tokens, QuotaWindow::Hourly),
    1.0,
    0,
  )
  .unwrap();
  assert!(locks::lock_calls() > before);
}

#[test]
fn a_classic_write_lock_of_the_host_excludes_the_engine() {
  let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
  let dir = tempfile::tempdir().unwrap();
  let path = dir.path().join("storage.sqlite");
  let db = SqliteDb::open(
    &path,
    &OpenOptions {
      busy_timeout: std::time::Duration::from_millis(30),
      ..OpenOptions::default()
    },
  )
  .unwrap();
  let k = key("p", QuotaUnit::Tokens, QuotaWindow::Hourly);
  db.consume("k", &k, 1.0, 0).unwrap();
  // The host is writing: it holds the WAL write lock of the -shm, classically.
  let host_shm = HostFd::open(&shm_path(&path));
  host_shm.classic_lock(libc::F_WRLCK, SHM_WRITE, 1);
  match db.consume("k", &k, 1.0, 0) {
    Err(QuotaError::Store(message)) => assert!(message.contains("locked"), "{message}"),
    other => panic!("the engine wrote through the host's write lock: {other:?}"),
  }
  // Reads go on (WAL readers never wait for the writer).
  assert_eq!(db.peek("k", &k, 0).unwrap(), 1.0);
  host_shm.classic_lock(libc::F_UNLCK, SHM_WRITE, 1);
  assert_eq!(db.consume("k", &k, 1.0, 0).unwrap(), 2.0);
}

#[test]
fn the_hosts_classic_locks_survive_engine_activity_and_close() {
  let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
  let (_dir, path, db) = temp_db();
  let k = key("p", QuotaUnit::Requests, QuotaWindow::Daily);
  db.consume("k", &k, 1.0, 0).unwrap();
  // The host's connection: a shared lock on the database, a read lock on the DMS byte.
  let host_db = HostFd::open(&path);
  let host_shm = HostFd::open(&shm_path(&path));
  host_db.classic_lock(libc::F_RDLCK, SHARED_FIRST, SHARED_SIZE);
  host_shm.classic_lock(libc::F_RDLCK, SHM_DMS, 1);
  assert!(host_db.classic_lock_held(SHARED_FIRST, SHARED_SIZE));
  assert!(host_shm.classic_lock_held(SHM_DMS, 1));
  // Engine reads, writes and a checkpoint lock and unlock the same bytes (as OFD locks).
  for i in 0..20 {
    db.consume("k", &k, 1.0, i).unwrap();
    db.peek("k", &k, i).unwrap();
  }
  db.connection()
    .execute_batch("PRAGMA wal_checkpoint(PASSIVE);")
    .unwrap();
  assert!(host_db.classic_lock_held(SHARED_FIRST, SHARED_SIZE));
  assert!(host_shm.classic_lock_held(SHM_DMS, 1));
  // Closing the engine's connection: its descriptors of both files are parked, not
  // closed (a close would drop every classic lock of the process on the file).
  let parked_before = locks::parked_count();
  db.close().unwrap();
  assert!(host_db.classic_lock_held(SHARED_FIRST, SHARED_SIZE));
  assert!(host_shm.classic_lock_held(SHM_DMS, 1));
  assert_eq!(locks::parked_count(), parked_before + 2);
  // The WAL and -shm were not unlinked under the host (its shared lock means the engine is
  // not the last user, so its SQLite removes nothing).
  assert!(shm_path(&path).exists());
  // While the host keeps the files open, sweeping closes nothing.
  assert_eq!(locks::sweep_parked(), 0);
  assert!(host_db.classic_lock_held(SHARED_FIRST, SHARED_SIZE));
  // Once the host closed them, the parked descriptors are closed.
  drop(host_db);
  drop(host_shm);
  assert_eq!(locks::sweep_parked(), 2);
  assert_eq!(locks::parked_count(), parked_before);
}

#[test]
fn closing_without_a_host_closes_for_real() {
  let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
  let (_dir, _path, db) = temp_db();
  db.consume("k", &key("p", QuotaUnit::Usd, QuotaWindow::Weekly), 0.5, 0)
    .unwrap();
  let parked_before = locks::parked_count();
  db.close().unwrap();
  assert_eq!(locks::parked_count(), parked_before);
}

/// The host's restore (its files unlinked, the backup copied in, its connection reopened)
/// landing while the engine's connection is being opened: the self-test's probe then finds
/// only the host's descriptor on the new `-shm`, where the engine holds no lock. That says
/// nothing about the hook, so it must not make the hook refuse every lock for the rest of
/// the process (the engine's SQLite calls would fail open until a restart).
#[test]
fn a_restore_under_the_open_does_not_make_the_hook_refuse() {
  let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
  let (_dir, path, db) = temp_db();
  assert_eq!(db.self_test_locks(0), LockCheck::Live);
  for suffix in ["", "-wal", "-shm"] {
    let mut file = path.as_os_str().to_owned();
    file.push(suffix);
    let _ = std::fs::remove_file(std::path::PathBuf::from(file));
  }
  std::fs::write(&path, b"").unwrap();
  std::fs::write(shm_path(&path), [0u8; 32768]).unwrap();
  let host_shm = HostFd::open(&shm_path(&path));
  // What misled the probe: no lock is seen on the -shm at the path.
  assert_eq!(locks::probe_shm(&path), Some(false));

  assert_eq!(db.self_test_locks(0), LockCheck::LiveUnprobed);
  assert_eq!(locks::installed().unwrap().detail, None, "the hook refuses");
  // The next open, on the restored file, holds and shows its locks. (The host's
  // descriptor goes first, so no descriptor of the engine's is left parked.)
  drop(host_shm);
  db.close().unwrap();
  let db = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  assert_eq!(db.open_report().locks, LockCheck::Live);
  db.consume(
    "k",
    &key("p", QuotaUnit::Requests, QuotaWindow::Hourly),
    1.0,
    0,
  )
  .unwrap();
  db.close().unwrap();
}
