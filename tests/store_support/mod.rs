//! Helpers shared by the `store_*` integration tests: temp databases, a second raw
//! connection standing in for the host's better-sqlite3 writer, and brute-force sums.
#![allow(dead_code)]

use omniroute_quota_engine::core::dimensions::{
  DimensionKey, PlanSource, Policy, PoolAllocation, ProviderPlan, QuotaDimension, QuotaUnit,
  QuotaWindow,
};
use omniroute_quota_engine::core::enforce::{QuotaRequest, SaturationLookup};
use omniroute_quota_engine::store::sqlite::locks;
use omniroute_quota_engine::store::NewPool;
use omniroute_quota_engine::store::{OpenOptions, SqliteDb};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const H: i64 = 3_600_000;
pub const DAY: i64 = 86_400_000;

/// A fresh database in its own temp folder.
pub fn temp_db() -> (tempfile::TempDir, PathBuf, SqliteDb) {
  let dir = tempfile::tempdir().expect("tempdir");
  let path = dir.path().join("storage.sqlite");
  let db = SqliteDb::open(&path, &OpenOptions::default()).expect("open");
  (dir, path, db)
}

/// A second connection to `path`, like the host's: WAL, a busy timeout. The lock hooks are
/// installed first so that it never mixes classic and OFD locks.
pub fn host_conn(path: &Path) -> Connection {
  locks::install();
  let conn = Connection::open(path).expect("host open");
  conn.busy_timeout(Duration::from_secs(10)).unwrap();
  conn
    .execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
    .unwrap();
  conn
}

pub fn key(pool: &str, unit: QuotaUnit, window: QuotaWindow) -> DimensionKey {
  DimensionKey::new(pool, unit, window)
}

pub fn alloc(id: &str, weight: f64) -> PoolAllocation {
  PoolAllocation {
    api_key_id: id.into(),
    weight,
    cap_value: None,
    cap_unit: None,
    policy: Policy::Hard,
  }
}

/// `SUM(consumed)` of one (dimension key, bucket), straight from the rows.
pub fn brute_sum(conn: &Connection, dimension_key: &str, bucket: i64) -> f64 {
  conn
    .query_row(
      "SELECT coalesce(SUM(consumed), 0) FROM quota_consumption
       WHERE dimension_key = ?1 AND bucket_index = ?2",
      rusqlite::params![dimension_key, bucket],
      |r| r.get(0),
    )
    .unwrap()
}

/// Every totals row, sorted.
pub fn totals(conn: &Connection) -> Vec<(String, i64, f64, i64)> {
  let mut stmt = conn
    .prepare(
      "SELECT dimension_key, bucket_index, consumed, row_count FROM quota_consumption_totals
       ORDER BY 1, 2",
    )
    .unwrap();
  stmt
    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
    .unwrap()
    .collect::<rusqlite::Result<_>>()
    .unwrap()
}

/// What the totals must be: a GROUP BY over the rows.
pub fn brute_totals(conn: &Connection) -> Vec<(String, i64, f64, i64)> {
  let mut stmt = conn
    .prepare(
      "SELECT dimension_key, bucket_index, SUM(coalesce(consumed, 0)), COUNT(*)
       FROM quota_consumption GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .unwrap();
  stmt
    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
    .unwrap()
    .collect::<rusqlite::Result<_>>()
    .unwrap()
}

/// The totals equal the brute-force sums, within `tolerance` per row.
pub fn assert_totals_exact(conn: &Connection, tolerance: f64) {
  let got = totals(conn);
  let want = brute_totals(conn);
  assert_eq!(
    got.iter().map(|t| (&t.0, t.1, t.3)).collect::<Vec<_>>(),
    want.iter().map(|t| (&t.0, t.1, t.3)).collect::<Vec<_>>(),
    "totals rows differ from the rows"
  );
  for (g, w) in got.iter().zip(&want) {
    assert!(
      (g.2 - w.2).abs() <= tolerance,
      "total of {:?}/{} is {} but the rows sum to {}",
      g.0,
      g.1,
      g.2,
      w.2
    );
  }
}

/// How many schema objects of `kind` exist.
pub fn schema_names(conn: &Connection, kind: &str) -> Vec<String> {
  let mut stmt = conn
    .prepare("SELECT name FROM sqlite_master WHERE type = ?1 ORDER BY name")
    .unwrap();
  stmt
    .query_map([kind], |r| r.get(0))
    .unwrap()
    .collect::<rusqlite::Result<_>>()
    .unwrap()
}

/// Saturation 0 for every dimension.
pub struct NoSaturation;
impl SaturationLookup for NoSaturation {
  fn saturation(&self, _: &str, _: &str, _: QuotaUnit, _: QuotaWindow) -> Option<f64> {
    Some(0.0)
  }
}

/// A fixed request time, mid-hour.
pub const NOW: i64 = 500_000 * H;

/// A pool on connection `c` with key `k` (hard, weight 100) and a plan of `limit`
/// requests and 1e9 tokens per hour; returns the pool id.
pub fn enforce_setup(db: &omniroute_quota_engine::store::SqliteDb, limit: f64) -> String {
  let pool = db
    .create_pool(
      &NewPool {
        connection_id: "c".into(),
        name: "p".into(),
        allocations: vec![PoolAllocation {
          api_key_id: "k".into(),
          weight: 100.0,
          cap_value: None,
          cap_unit: None,
          policy: Policy::Hard,
        }],
        ..Default::default()
      },
      0,
    )
    .unwrap();
  db.upsert_provider_plan(
    &ProviderPlan {
      connection_id: Some("c".into()),
      provider: "acme".into(),
      dimensions: vec![
        QuotaDimension {
          unit: QuotaUnit::Requests,
          window: QuotaWindow::Hourly,
          limit,
        },
        QuotaDimension {
          unit: QuotaUnit::Tokens,
          window: QuotaWindow::Hourly,
          limit: 1e9,
        },
      ],
      source: PlanSource::Manual,
    },
    0,
  )
  .unwrap();
  pool.id
}

/// Key `k` on connection `c`, provider `acme`.
pub fn request() -> QuotaRequest<'static> {
  QuotaRequest {
    api_key_id: "k",
    connection_id: "c",
    provider: "acme",
    model: None,
  }
}

/// The lock-call and unmap counters are process-wide, and a binary's tests run on parallel
/// threads: tests that count them hold this, so no other test's connection moves them
/// meanwhile.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
  static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
  SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The host writes `consumed` into one counter bucket through its own connection.
pub fn host_put(
  host: &Connection,
  api_key_id: &str,
  dimension_key: &str,
  bucket: i64,
  consumed: f64,
) {
  host
    .execute(
      "INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?1, ?2, ?3, ?4, 0)",
      rusqlite::params![api_key_id, dimension_key, bucket, consumed],
    )
    .unwrap();
}
