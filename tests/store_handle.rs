//! The process-wide connection (docs/contract.md §0, §4): lazy open with the path resolved at open
//! time, `closeQuotaDb` and reopen, a deleted-and-recreated data directory, and the
//! retention sweep through the same connection.

mod store_support;

use omniroute_quota_engine::core::dimensions::{QuotaUnit, QuotaWindow};
use omniroute_quota_engine::store::sqlite::{
  run_retention_sweep, set_open_options, spawn_retention_sweeper, SweepReport,
};
use omniroute_quota_engine::store::{
  close_quota_db, default_db_path, with_db, with_open_db, CounterStore, OpenOptions,
};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;
use store_support::*;

/// One process-wide connection: these tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn data_dir_path(dir: &std::path::Path) -> impl Fn() -> PathBuf + '_ {
  move || {
    let data_dir = dir.to_string_lossy().into_owned();
    default_db_path(&|name| (name == "DATA_DIR").then(|| data_dir.clone()))
  }
}

#[test]
fn opens_lazily_and_reopens_after_close() {
  let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
  close_quota_db().unwrap();
  let a = tempfile::tempdir().unwrap();
  let b = tempfile::tempdir().unwrap();
  let k = key("p", QuotaUnit::Tokens, QuotaWindow::Hourly);
  assert!(with_open_db(|_| Ok(())).is_none());
  let resolved = std::cell::Cell::new(0);
  let resolve_a = || {
    resolved.set(resolved.get() + 1);
    data_dir_path(a.path())()
  };
  let got = with_db(&resolve_a, |db| db.consume("k", &k, 2.0, 0)).unwrap();
  assert_eq!(got, 2.0);
  assert!(a.path().join("storage.sqlite").exists());
  // Open: the path is not resolved again.
  with_db(&resolve_a, |db| db.consume("k", &k, 2.0, 0)).unwrap();
  assert_eq!(resolved.get(), 1);
  assert!(with_open_db(|db| db.peek("k", &k, 0)).unwrap().unwrap() == 4.0);
  // Closed: the next call re-resolves (another DATA_DIR now).
  close_quota_db().unwrap();
  close_quota_db().unwrap();
  assert!(with_open_db(|_| Ok(())).is_none());
  let got = with_db(&data_dir_path(b.path()), |db| {
    Ok((db.path().to_path_buf(), db.peek("k", &k, 0)?))
  })
  .unwrap();
  assert_eq!(got, (b.path().join("storage.sqlite"), 0.0));
  close_quota_db().unwrap();
  let back = with_db(&data_dir_path(a.path()), |db| db.peek("k", &k, 0)).unwrap();
  assert_eq!(back, 4.0);
  close_quota_db().unwrap();
}

#[test]
fn a_deleted_data_dir_is_never_used_again() {
  let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
  close_quota_db().unwrap();
  let root = tempfile::tempdir().unwrap();
  let data = root.path().join("data");
  let k = key("p", QuotaUnit::Requests, QuotaWindow::Daily);
  let resolve = data_dir_path(&data);
  with_db(&resolve, |db| db.consume("k", &k, 5.0, 0)).unwrap();
  // The host's test reset: delete the folder and recreate it (without closeQuotaDb).
  std::fs::remove_dir_all(&data).unwrap();
  std::fs::create_dir_all(&data).unwrap();
  let after = with_db(&resolve, |db| db.peek("k", &k, 0)).unwrap();
  assert_eq!(after, 0.0);
  assert!(data.join("storage.sqlite").exists());
  with_db(&resolve, |db| db.consume("k", &k, 1.0, 0)).unwrap();
  // Deleted and not recreated: the background path does not recreate it.
  std::fs::remove_dir_all(&data).unwrap();
  assert!(with_open_db(|_| Ok(())).is_none());
  assert!(!data.exists());
  close_quota_db().unwrap();
}

#[test]
fn retention_sweep_uses_the_open_connection_only() {
  let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
  close_quota_db().unwrap();
  set_open_options(OpenOptions {
    busy_timeout: Duration::from_millis(1500),
  });
  assert!(run_retention_sweep(14.0, 100 * DAY).is_none());
  let dir = tempfile::tempdir().unwrap();
  let resolve = data_dir_path(dir.path());
  let now = 100 * DAY;
  with_db(&resolve, |db| {
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
  })
  .unwrap();
  let report = run_retention_sweep(14.0, now).unwrap().unwrap();
  assert_eq!(
    report,
    SweepReport {
      deleted: 1500,
      totals_fixed: 0
    }
  );
  with_db(&resolve, |db| {
    assert_eq!(db.sum_pool_dimension("p:tokens:daily", 1)?, (0.0, 0.0));
    assert_eq!(db.sum_pool_dimension("p:tokens:daily", 99)?, (1.0, 0.0));
    assert_totals_exact(db.connection(), 0.0);
    Ok(())
  })
  .unwrap();
  assert!(run_retention_sweep(0.0, now).unwrap().is_err());
  // The sweeper thread starts once; it sleeps a long interval and never blocks a test.
  assert!(spawn_retention_sweeper(
    Duration::from_secs(3600),
    || 14.0,
    |_| {}
  ));
  assert!(!spawn_retention_sweeper(
    Duration::from_secs(1),
    || 14.0,
    |_| {}
  ));
  close_quota_db().unwrap();
  set_open_options(OpenOptions::default());
}
