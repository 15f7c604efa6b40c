//! Two copies of SQLite in one process, as in production (docs/contract.md §4,
//! docs/two-sqlites.md): the system's `libsqlite3.so.0`, loaded with `dlopen`, plays
//! the host's better-sqlite3 (classic POSIX locks); the engine's bundled copy runs with
//! its hooks; a `python3` process is the outside checkpointer. Skipped (with a note) where
//! the system library or `python3` is missing.
#![cfg(all(
  target_os = "linux",
  any(target_arch = "x86_64", target_arch = "aarch64")
))]
#![deny(clippy::undocumented_unsafe_blocks)]

mod store_support;

use omniroute_quota_engine::core::dimensions::{QuotaUnit, QuotaWindow};
use omniroute_quota_engine::store::sqlite::locks;
use omniroute_quota_engine::store::{OpenOptions, SqliteDb};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;
use std::process::Command;
use store_support::*;

type OpenV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, *const c_char) -> c_int;
type Exec = unsafe extern "C" fn(
  *mut c_void,
  *const c_char,
  *const c_void,
  *mut c_void,
  *mut *mut c_char,
) -> c_int;
type Close = unsafe extern "C" fn(*mut c_void) -> c_int;
type LibVersion = unsafe extern "C" fn() -> *const c_char;

/// The "host": a connection of the system's SQLite, a separate copy with classic locks.
struct HostSqlite {
  db: *mut c_void,
  exec: Exec,
  close: Close,
}

impl HostSqlite {
  fn load(path: &Path) -> Option<HostSqlite> {
    // SAFETY: `dlsym`/`dlopen` get NUL-terminated names; each symbol is non-null
    // (asserted) and transmuted to its C signature in sqlite3.h; the version functions
    // return static NUL-terminated strings; `open` gets a NUL-terminated path that
    // outlives the call and a local out-pointer.
    unsafe {
      // Our own copy must not be visible to the system library (no interposition).
      if !libc::dlsym(libc::RTLD_DEFAULT, c"sqlite3_vfs_find".as_ptr()).is_null() {
        panic!("the test binary exports sqlite3_* symbols");
      }
      let lib = libc::dlopen(
        c"libsqlite3.so.0".as_ptr(),
        libc::RTLD_NOW | libc::RTLD_LOCAL,
      );
      if lib.is_null() {
        return None;
      }
      let sym = |name: &CStr| {
        let p = libc::dlsym(lib, name.as_ptr());
        assert!(!p.is_null(), "{name:?}");
        p
      };
      let open: OpenV2 = std::mem::transmute::<*mut c_void, OpenV2>(sym(c"sqlite3_open_v2"));
      let exec: Exec = std::mem::transmute::<*mut c_void, Exec>(sym(c"sqlite3_exec"));
      let close: Close = std::mem::transmute::<*mut c_void, Close>(sym(c"sqlite3_close"));
      let version: LibVersion =
        std::mem::transmute::<*mut c_void, LibVersion>(sym(c"sqlite3_libversion"));
      let system_version = CStr::from_ptr(version()).to_string_lossy().into_owned();
      assert_ne!(
        system_version,
        CStr::from_ptr(rusqlite::ffi::sqlite3_libversion()).to_string_lossy(),
        "need a different SQLite than the bundled one"
      );
      let c_path = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
      let mut db = std::ptr::null_mut();
      let flags = 0x2 | 0x4; // SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
      assert_eq!(open(c_path.as_ptr(), &mut db, flags, std::ptr::null()), 0);
      Some(HostSqlite { db, exec, close })
    }
  }

  fn exec(&self, sql: &str) -> c_int {
    let sql = CString::new(sql).unwrap();
    // SAFETY: `self.db` is the connection `load` opened, closed only on drop; `sql` is
    // NUL-terminated and outlives the call; no callback and no error out-pointer.
    unsafe {
      (self.exec)(
        self.db,
        sql.as_ptr(),
        std::ptr::null(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
      )
    }
  }
}

impl Drop for HostSqlite {
  fn drop(&mut self) {
    // SAFETY: `self.db` was opened by `load` and is closed once, here.
    unsafe { (self.close)(self.db) };
  }
}

/// `PRAGMA wal_checkpoint(TRUNCATE)` from another process: its `busy` column (1 while a
/// reader of this process holds its read lock), or `None` without python3.
fn outside_checkpoint_busy(path: &Path) -> Option<i64> {
  let out = Command::new("python3")
    .arg("-c")
    .arg(
      "import sqlite3, sys\n\
       c = sqlite3.connect(sys.argv[1], timeout=0.05)\n\
       print(c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchone()[0])",
    )
    .arg(path)
    .output()
    .ok()?;
  if !out.status.success() {
    return None;
  }
  String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

#[test]
fn the_hosts_read_lock_survives_the_engine() {
  let dir = tempfile::tempdir().unwrap();
  let path = dir.path().join("storage.sqlite");
  locks::install();
  let Some(host) = HostSqlite::load(&path) else {
    eprintln!("skipped: no libsqlite3.so.0 on this machine");
    return;
  };
  assert_eq!(
    host.exec(
      "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 2000;
       CREATE TABLE IF NOT EXISTS t (x); INSERT INTO t VALUES (1);"
    ),
    0
  );
  // The host opens a read transaction.
  assert_eq!(host.exec("BEGIN; SELECT count(*) FROM t;"), 0);
  let Some(busy) = outside_checkpoint_busy(&path) else {
    eprintln!("skipped: no python3 with sqlite3");
    return;
  };
  assert_eq!(
    busy, 1,
    "the host's read transaction blocks a TRUNCATE checkpoint"
  );
  // The engine opens the same file, migrates, writes, reads.
  let engine = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  assert!(engine.open_report().locks.is_live());
  let k = key("p", QuotaUnit::Tokens, QuotaWindow::Hourly);
  for i in 0..50 {
    engine.consume("k", &k, 1.0, i).unwrap();
  }
  assert_eq!(engine.peek("k", &k, 50).unwrap(), 50.0);
  assert_eq!(
    outside_checkpoint_busy(&path),
    Some(1),
    "the engine's activity released the host's read lock"
  );
  // The engine closes its connection while the host still reads.
  engine.close().unwrap();
  assert_eq!(
    outside_checkpoint_busy(&path),
    Some(1),
    "closing the engine released the host's read lock"
  );
  // The host ends its transaction: now the checkpoint goes through.
  assert_eq!(host.exec("COMMIT;"), 0);
  assert_eq!(outside_checkpoint_busy(&path), Some(0));
  // Every engine write is there for the host.
  assert_eq!(
    host.exec("CREATE TABLE check_rows AS SELECT consumed FROM quota_consumption;"),
    0
  );
  drop(host);
  let again = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  let consumed: f64 = again
    .connection()
    .query_row("SELECT consumed FROM check_rows", [], |r| r.get(0))
    .unwrap();
  assert_eq!(consumed, 50.0);
  let integrity: String = again
    .connection()
    .query_row("PRAGMA integrity_check", [], |r| r.get(0))
    .unwrap();
  assert_eq!(integrity, "ok");
  drop(again);
  locks::sweep_parked();
}

#[test]
fn host_and_engine_writes_exclude_each_other() {
  let dir = tempfile::tempdir().unwrap();
  let path = dir.path().join("storage.sqlite");
  locks::install();
  let engine = SqliteDb::open(
    &path,
    &OpenOptions {
      busy_timeout: std::time::Duration::from_millis(30),
      ..OpenOptions::default()
    },
  )
  .unwrap();
  let Some(host) = HostSqlite::load(&path) else {
    eprintln!("skipped: no libsqlite3.so.0 on this machine");
    return;
  };
  let k = key("p", QuotaUnit::Requests, QuotaWindow::Daily);
  engine.consume("k", &k, 1.0, 0).unwrap();
  assert_eq!(host.exec("PRAGMA busy_timeout = 30; BEGIN IMMEDIATE;"), 0);
  assert!(
    engine.consume("k", &k, 1.0, 0).is_err(),
    "the engine wrote during the host's write"
  );
  assert_eq!(host.exec("COMMIT;"), 0);
  assert_eq!(engine.consume("k", &k, 1.0, 0).unwrap(), 2.0);
  // And the other way round: the engine holds the write lock, the host is busy.
  engine
    .connection()
    .execute_batch("BEGIN IMMEDIATE")
    .unwrap();
  assert_eq!(
    host.exec("INSERT INTO key_value VALUES ('a', 'b', 'c');"),
    5
  ); // SQLITE_BUSY
  engine.connection().execute_batch("COMMIT").unwrap();
  assert_eq!(
    host.exec("INSERT INTO key_value VALUES ('a', 'b', 'c');"),
    0
  );
  assert_eq!(engine.read_setting("a", "b").unwrap().as_deref(), Some("c"));
}
