//! The engine's connection (docs/contract.md §0, §4), as `engine/database.rs` holds it: lazy
//! open at the path resolved at open time, `closeQuotaDb` and reopen, a deleted-and-recreated
//! data directory, and the retention sweep through the same connection. Each test has a
//! `Database` of its own.

mod store_support;

use omniroute_quota_engine::core::dimensions::{QuotaUnit, QuotaWindow};
use omniroute_quota_engine::engine::database::{Access, Database, PathSource, SweepReport};
use omniroute_quota_engine::engine::Engine;
use omniroute_quota_engine::error::{QuotaError, Result};
use omniroute_quota_engine::store::sqlite::{Recorded, RETRY_AFTER_FAILURE};
use omniroute_quota_engine::store::{OpenOptions, SqliteDb};
use std::path::Path;
use std::time::Duration;
use store_support::*;

/// `db` opens `dir/storage.sqlite` from its next open.
fn at(db: &Database, dir: &Path) {
  db.set_source(
    PathSource::Fixed(dir.join("storage.sqlite")),
    std::thread::current().id(),
  );
}

/// `f` on `db`'s connection, buffered records committed first; whether this call opened it.
fn with_db<T>(db: &Database, f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> (T, bool) {
  let (result, opened) = db.run(Access::Full, f);
  (result.unwrap(), opened)
}

#[test]
fn opens_lazily_and_reopens_after_close() {
  let db = Database::default();
  let a = tempfile::tempdir().unwrap();
  let b = tempfile::tempdir().unwrap();
  let k = key("p", QuotaUnit::Tokens, QuotaWindow::Hourly);
  at(&db, a.path());
  assert!(db.with_open(Access::Full, |_| Ok(())).is_none());
  assert!(!a.path().join("storage.sqlite").exists());
  assert_eq!(with_db(&db, |db| db.consume("k", &k, 2.0, 0)), (2.0, true));
  assert!(a.path().join("storage.sqlite").exists());
  // Open: not opened again.
  assert_eq!(with_db(&db, |db| db.consume("k", &k, 2.0, 0)), (4.0, false));
  let peeked = db.with_open(Access::Full, |db| db.peek("k", &k, 0));
  assert_eq!(peeked.unwrap().unwrap(), 4.0);
  // Closed: the next call opens at the path set now.
  db.close().unwrap();
  db.close().unwrap();
  assert!(db.with_open(Access::Full, |_| Ok(())).is_none());
  at(&db, b.path());
  let got = with_db(&db, |db| {
    Ok((db.path().to_path_buf(), db.peek("k", &k, 0)?))
  });
  assert_eq!(got, ((b.path().join("storage.sqlite"), 0.0), true));
  db.close().unwrap();
  at(&db, a.path());
  assert_eq!(with_db(&db, |db| db.peek("k", &k, 0)), (4.0, true));
  // Another engine's database is its own: open on another file at the same time, while a
  // second connection to the same file is refused (one per file per process, the locks'
  // rule).
  let other = Database::default();
  at(&other, b.path());
  assert_eq!(with_db(&other, |db| db.peek("k", &k, 0)), (0.0, true));
  at(&other, a.path());
  other.close().unwrap();
  let (refused, _) = other.run(Access::Full, |_| Ok(()));
  assert!(refused
    .unwrap_err()
    .to_string()
    .contains("already open in this process"));
  assert!(!other.is_open());
  db.close().unwrap();
}

#[test]
fn a_deleted_data_dir_is_never_used_again() {
  let db = Database::default();
  let root = tempfile::tempdir().unwrap();
  let data = root.path().join("data");
  let k = key("p", QuotaUnit::Requests, QuotaWindow::Daily);
  at(&db, &data);
  with_db(&db, |db| db.consume("k", &k, 5.0, 0));
  // The host's test reset: delete the folder and recreate it (without closeQuotaDb).
  std::fs::remove_dir_all(&data).unwrap();
  std::fs::create_dir_all(&data).unwrap();
  assert_eq!(with_db(&db, |db| db.peek("k", &k, 0)), (0.0, true));
  assert!(data.join("storage.sqlite").exists());
  with_db(&db, |db| db.consume("k", &k, 1.0, 0));
  // Deleted and not recreated: the background path does not recreate it.
  std::fs::remove_dir_all(&data).unwrap();
  assert!(db.with_open(Access::Full, |_| Ok(())).is_none());
  assert!(!data.exists());
  db.close().unwrap();
}

#[test]
fn retention_sweep_uses_the_open_connection_only() {
  // The sweeper's thread borrows its database for the process's life, as the engine's.
  let db: &'static Database = Box::leak(Box::new(Database::with_options(OpenOptions {
    busy_timeout: Duration::from_millis(1500),
    ..OpenOptions::default()
  })));
  assert!(db.sweep(14.0, 100 * DAY).is_none());
  let dir = tempfile::tempdir().unwrap();
  at(db, dir.path());
  let now = 100 * DAY;
  with_db(db, |db| {
    for i in 0..1500i64 {
      db.increment_bucket(&format!("old{i}"), "p:tokens:daily", 1, 1.0, now - 20 * DAY)?;
    }
    db.increment_bucket("fresh", "p:tokens:daily", 99, 1.0, now - DAY)?;
    assert_eq!(
      db.connection()
        .query_row("PRAGMA busy_timeout", [], |r| r.get::<_, i64>(0))
        .unwrap(),
      1500
    );
    Ok(())
  });
  let report = db.sweep(14.0, now).unwrap().unwrap();
  assert_eq!(
    report,
    SweepReport {
      deleted: 1500,
      totals_fixed: 0
    }
  );
  with_db(db, |db| {
    assert_eq!(db.sum_pool_dimension("p:tokens:daily", 1)?, (0.0, 0.0));
    assert_eq!(db.sum_pool_dimension("p:tokens:daily", 99)?, (1.0, 0.0));
    assert_totals_exact(db.connection(), 0.0);
    Ok(())
  });
  assert!(db.sweep(0.0, now).unwrap().is_err());
  // The sweeper thread starts once; it sleeps a long interval and never blocks a test.
  assert!(db.spawn_sweeper(Duration::from_secs(3600), || {}));
  assert!(!db.spawn_sweeper(Duration::from_secs(1), || {}));
  db.close().unwrap();
}

/// Counter rows of `api_key_id` in the file at `path`; `None` when it has no such table.
fn rows_at(path: &Path, api_key_id: &str) -> Option<f64> {
  let sql = "SELECT coalesce(sum(consumed), 0) FROM quota_consumption WHERE api_key_id = ?1";
  let conn = rusqlite::Connection::open(path).unwrap();
  conn.query_row(sql, [api_key_id], |row| row.get(0)).ok()
}

#[test]
fn a_store_call_and_the_teardown_commit_no_record_to_a_file_renamed_away_a_moment_ago() {
  // The per-call check looks the path up at most every 100 ms, so a file renamed away
  // with another put in its place goes unseen for that long; the calls that commit the
  // buffer look the path up first.
  let dir = tempfile::tempdir().unwrap();
  let path = dir.path().join("storage.sqlite");
  let key = key("pool", QuotaUnit::Requests, QuotaWindow::Hourly);
  let me = std::thread::current().id();
  type Commit = fn(&'static Engine);
  let store_call: Commit = |engine| engine.with_db(|_| Ok(())).unwrap();
  // A worker's teardown commits the records carried to the file now at the path itself:
  // no flush timer may be left to do it.
  let teardown: Commit = |engine| engine.commit_at_teardown();
  for (i, (name, commit)) in [("store call", store_call), ("teardown", teardown)]
    .into_iter()
    .enumerate()
  {
    let engine: &'static Engine = Box::leak(Box::default());
    engine
      .database
      .set_source(PathSource::Fixed(path.clone()), me);
    // Opened first: the open's own follow-up commits what is buffered.
    engine.with_hot_db(|_| Ok(())).unwrap();
    let recorded = engine.with_hot_db(|db| {
      let recorded = db.record_writes("k", &[(key.clone(), 1.0)], 0, Duration::from_secs(60));
      // Looked up now: the next lookup of the per-call check is 100 ms away.
      assert!(!db.file_replaced_now());
      recorded
    });
    assert_eq!(recorded.unwrap(), Recorded::Buffered);
    let moved = dir.path().join(format!("moved-{i}.sqlite"));
    std::fs::rename(&path, &moved).unwrap();
    // Another database put in its place (an empty file is one still being copied in).
    let other = dir.path().join(format!("other-{i}.sqlite"));
    rusqlite::Connection::open(&other)
      .and_then(|conn| conn.execute_batch("PRAGMA user_version = 7"))
      .unwrap();
    std::fs::rename(&other, &path).unwrap();
    commit(engine);
    engine.close_db().unwrap();
    assert_eq!(
      rows_at(&moved, "k"),
      Some(0.0),
      "{name}: nothing in the file renamed away"
    );
    assert_eq!(
      rows_at(&path, "k"),
      Some(1.0),
      "{name}: the record in the file at the path"
    );
    std::fs::remove_file(&path).unwrap();
  }
}

/// Where the engine had the file, a missing one is a restore under way for
/// `restore_grace`: no database is made there meanwhile. Missing for longer, it was
/// deleted for good (the engine closed, the file removed), and the next call starts afresh.
#[test]
fn a_file_deleted_for_good_is_made_afresh_after_the_restore_grace() {
  let db = Database::with_options(OpenOptions {
    restore_grace: Duration::from_millis(300),
    ..OpenOptions::default()
  });
  let dir = tempfile::tempdir().unwrap();
  let path = dir.path().join("storage.sqlite");
  at(&db, dir.path());
  with_db(&db, |_| Ok(()));
  db.close().unwrap();
  std::fs::remove_file(&path).unwrap();
  let err = db.run(Access::Full, |_| Ok(())).0.unwrap_err();
  assert!(err.to_string().contains("missing or empty"), "{err}");
  assert!(!path.exists());
  std::thread::sleep(Duration::from_millis(350));
  with_db(&db, |_| Ok(()));
  assert!(path.exists());
}

/// A `Database` whose first open failed: the host's file had another `quota_consumption`,
/// which the host has dropped since, in its WAL only (the file, the WAL's inode and the
/// folder are as they were).
fn failed_first_open() -> (
  tempfile::TempDir,
  Database,
  rusqlite::Connection,
  QuotaError,
) {
  let db = Database::default();
  let dir = tempfile::tempdir().unwrap();
  at(&db, dir.path());
  let host = host_conn(&dir.path().join("storage.sqlite"));
  let other_schema = "CREATE TABLE quota_consumption (x TEXT); PRAGMA wal_checkpoint(TRUNCATE);";
  host.execute_batch(other_schema).unwrap();
  let failed = db.run(Access::Hot, |_| Ok(())).0.unwrap_err();
  host.execute_batch("DROP TABLE quota_consumption;").unwrap();
  (dir, db, host, failed)
}

/// A file the engine could not open is not opened again on every call (an unmigratable
/// one would cost each a whole open): until `RETRY_AFTER_FAILURE` has passed, the next
/// calls fail at once with the same error.
#[test]
fn a_failed_open_is_not_tried_again_on_every_call() {
  let (_dir, db, _host, failed) = failed_first_open();
  assert_eq!(db.run(Access::Hot, |_| Ok(())).0.unwrap_err(), failed);
  std::thread::sleep(RETRY_AFTER_FAILURE + Duration::from_millis(100));
  assert!(db.run(Access::Hot, |_| Ok(())).0.is_ok());
}

/// ... unless the file (here checkpointed) or its folder (here its mode) has changed
/// since: tried again at once.
#[test]
fn a_failed_open_is_tried_again_at_once_when_the_file_or_its_folder_changed() {
  let (_dir, db, host, _) = failed_first_open();
  host
    .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
    .unwrap();
  assert!(db.run(Access::Hot, |_| Ok(())).0.is_ok());
  let (dir, db, _host, _) = failed_first_open();
  use std::os::unix::fs::PermissionsExt;
  let folder = std::fs::Permissions::from_mode(0o770);
  std::fs::set_permissions(dir.path(), folder).unwrap();
  assert!(db.run(Access::Hot, |_| Ok(())).0.is_ok());
}

/// An open that failed on another connection's write lock is tried again on the next
/// call: the lock's release leaves no trace on the file.
#[test]
fn an_open_that_met_a_lock_is_tried_again_at_once() {
  let db = Database::with_options(OpenOptions {
    busy_timeout: Duration::from_millis(50),
    ..OpenOptions::default()
  });
  let dir = tempfile::tempdir().unwrap();
  at(&db, dir.path());
  let host = host_conn(&dir.path().join("storage.sqlite"));
  let host_schema = "CREATE TABLE host_rows (x); PRAGMA wal_checkpoint(TRUNCATE);";
  host.execute_batch(host_schema).unwrap();
  host.execute_batch("BEGIN IMMEDIATE;").unwrap();
  let failed = db.run(Access::Hot, |_| Ok(())).0.unwrap_err();
  assert!(
    failed.to_string().contains("database is locked"),
    "{failed}"
  );
  host.execute_batch("ROLLBACK;").unwrap();
  assert!(db.run(Access::Hot, |_| Ok(())).0.is_ok());
}

/// The restore guard knows the file however the path names it: opened through a link to
/// its folder and then named by its real path, a missing file is a restore under way.
#[cfg(unix)]
#[test]
fn the_restore_guard_knows_the_file_by_another_name() {
  let db = Database::default();
  let dir = tempfile::tempdir().unwrap();
  let (real, link) = (dir.path().join("real"), dir.path().join("link"));
  std::fs::create_dir(&real).unwrap();
  std::os::unix::fs::symlink(&real, &link).unwrap();
  at(&db, &link);
  with_db(&db, |_| Ok(()));
  at(&db, &real);
  db.close().unwrap();
  std::fs::remove_file(real.join("storage.sqlite")).unwrap();
  let err = db.run(Access::Full, |_| Ok(())).0.unwrap_err();
  assert!(err.to_string().contains("missing or empty"), "{err}");
  assert!(!real.join("storage.sqlite").exists());
}

/// Takes write access to `file` away from this process (`writable: false`) or gives it
/// back. Root writes any file whatever its mode, so for root the file is made immutable.
#[cfg(target_os = "linux")]
fn set_writable(file: &Path, writable: bool) {
  use std::os::unix::fs::{MetadataExt, PermissionsExt};
  if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
    let flag = if writable { "-i" } else { "+i" };
    let chattr = std::process::Command::new("chattr")
      .arg(flag)
      .arg(file)
      .status();
    assert!(chattr.is_ok_and(|s| s.success()), "chattr {flag} failed");
  } else {
    let mode = if writable { 0o644 } else { 0o444 };
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).unwrap();
  }
}

/// A file this process may only read is refused at open, saying so, rather than opened
/// read-only (SQLite's fallback), where every record would fail until something reopened
/// it; given write access again, it is opened on the next call.
#[cfg(target_os = "linux")]
#[test]
fn a_file_the_process_may_not_write_is_refused_until_it_may() {
  let db = Database::default();
  let dir = tempfile::tempdir().unwrap();
  at(&db, dir.path());
  let file = dir.path().join("storage.sqlite");
  let host_schema = "CREATE TABLE host_rows (x); PRAGMA wal_checkpoint(TRUNCATE);";
  host_conn(&file).execute_batch(host_schema).unwrap();
  set_writable(&file, false);
  let failed = db.run(Access::Hot, |_| Ok(())).0;
  set_writable(&file, true);
  let failed = failed.unwrap_err().to_string();
  assert!(failed.contains("may not write"), "{failed}");
  assert!(db.run(Access::Hot, |_| Ok(())).0.is_ok());
  db.close().unwrap();
}
