//! Opening (docs/contract.md §4, §5): pragmas, idempotent migrations on fresh and host-migrated
//! files (existing rows untouched, totals backfilled exactly, no duplicate indexes), one
//! connection per file.

mod store_support;

use omniroute_quota_engine::core::dimensions::{QuotaUnit, QuotaWindow};
use omniroute_quota_engine::store::sqlite::locks;
use omniroute_quota_engine::store::{OpenOptions, SqliteDb};
use rusqlite::Connection;
use std::path::Path;
use store_support::*;

const TABLES: [&str; 10] = [
  "key_value",
  "provider_plans",
  "quota_allocation_model_caps",
  "quota_allocations",
  "quota_consumption",
  "quota_consumption_totals",
  "quota_data_version",
  "quota_metadata_version",
  "quota_pool_connections",
  "quota_pools",
];

fn pragma(conn: &Connection, name: &str) -> String {
  conn
    .query_row(&format!("PRAGMA {name}"), [], |r| {
      Ok(match r.get_ref(0)? {
        rusqlite::types::ValueRef::Integer(i) => i.to_string(),
        other => String::from_utf8_lossy(other.as_bytes().unwrap_or_default()).into_owned(),
      })
    })
    .unwrap()
}

#[test]
fn a_fresh_file_gets_the_schema_and_the_pragmas() {
  let (_dir, path, db) = temp_db();
  let report = db.open_report().clone();
  assert!(report.migrated);
  assert_eq!(report.journal_mode, "wal");
  assert!(report.bundled, "{report:?}");
  assert!(report.warnings().is_empty(), "{:?}", report.warnings());
  let conn = db.connection();
  assert_eq!(pragma(conn, "journal_mode"), "wal");
  assert_eq!(pragma(conn, "busy_timeout"), "2000");
  assert_eq!(pragma(conn, "synchronous"), "1");
  assert_eq!(pragma(conn, "foreign_keys"), "1");
  let tables = schema_names(conn, "table");
  for t in TABLES {
    assert!(
      tables.contains(&t.to_string()),
      "{t} missing from {tables:?}"
    );
  }
  let indexes = schema_names(conn, "index");
  for i in [
    "idx_quota_consumption_dim_bucket",
    "idx_quota_consumption_updated_at",
    "idx_quota_allocations_apikey",
  ] {
    assert!(indexes.contains(&i.to_string()), "{i} missing");
  }
  // Totals (4), metadata version (15), counter version (6).
  assert_eq!(schema_names(conn, "trigger").len(), 4 + 15 + 6);
  assert_eq!(db.path(), path);
  // A custom busy timeout.
  drop(db);
  let db = SqliteDb::open(
    &path,
    &OpenOptions {
      busy_timeout: std::time::Duration::from_millis(250),
      ..OpenOptions::default()
    },
  )
  .unwrap();
  assert_eq!(pragma(db.connection(), "busy_timeout"), "250");
}

#[test]
fn migrations_are_idempotent() {
  let (dir, path, db) = temp_db();
  let k = key("p", QuotaUnit::Tokens, QuotaWindow::Hourly);
  db.consume("a", &k, 3.0, 5 * H).unwrap();
  let schema_version = pragma(db.connection(), "schema_version");
  db.close().unwrap();
  let db = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  assert!(!db.open_report().migrated);
  assert_eq!(pragma(db.connection(), "schema_version"), schema_version);
  assert_eq!(db.peek("a", &k, 5 * H).unwrap(), 3.0);
  assert_eq!(db.pool_consumed_total(&k, 5 * H).unwrap(), 3.0);
  drop(db);
  drop(dir);
}

#[test]
fn one_connection_per_file() {
  let (_dir, path, db) = temp_db();
  let err = SqliteDb::open(&path, &OpenOptions::default()).unwrap_err();
  assert!(err.to_string().contains("already open"), "{err}");
  drop(db);
  let again = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  drop(again);
}

#[test]
fn a_host_migrated_file_keeps_its_rows_and_gets_exact_totals() {
  let dir = tempfile::tempdir().unwrap();
  let path = dir.path().join("nested").join("storage.sqlite");
  std::fs::create_dir_all(path.parent().unwrap()).unwrap();
  locks::install();
  {
    // The host's own schema, its own index names, and rows written before the engine.
    let host = Connection::open(&path).unwrap();
    host
      .execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE quota_consumption (
           api_key_id TEXT NOT NULL, dimension_key TEXT NOT NULL, bucket_index INTEGER NOT NULL,
           consumed REAL NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL,
           PRIMARY KEY (api_key_id, dimension_key, bucket_index));
         CREATE INDEX idx_qc_dim ON quota_consumption(dimension_key, bucket_index);
         CREATE INDEX idx_qc_upd ON quota_consumption(updated_at);
         CREATE TABLE quota_pools (id TEXT PRIMARY KEY, connection_id TEXT NOT NULL,
           name TEXT NOT NULL, created_at TEXT DEFAULT CURRENT_TIMESTAMP, group_id TEXT);
         INSERT INTO quota_pools (id, connection_id, name) VALUES ('p', 'c', 'Host');
         CREATE TABLE key_value (namespace TEXT, key TEXT, value TEXT, PRIMARY KEY (namespace, key));
         INSERT INTO key_value VALUES ('settings', 'quotaStore', '{\"driver\":\"sqlite\"}');",
      )
      .unwrap();
    let tx = host.unchecked_transaction().unwrap();
    let mut insert = tx
      .prepare("INSERT INTO quota_consumption VALUES (?1, ?2, ?3, ?4, 0)")
      .unwrap();
    for i in 0..500i64 {
      insert
        .execute(rusqlite::params![
          format!("k{}", i % 13),
          format!("p{}:tokens:hourly", i % 3),
          i / 13,
          (i % 17) as f64 + 0.25
        ])
        .unwrap();
    }
    drop(insert);
    tx.commit().unwrap();
  }
  let rows_before: Vec<(String, String, i64, f64)> = {
    let host = Connection::open(&path).unwrap();
    let mut stmt = host
      .prepare("SELECT * FROM quota_consumption ORDER BY 1, 2, 3")
      .unwrap();
    let rows = stmt
      .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
      .unwrap()
      .collect::<rusqlite::Result<_>>()
      .unwrap();
    rows
  };
  let db = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  assert!(db.open_report().migrated);
  let conn = db.connection();
  let mut stmt = conn
    .prepare("SELECT * FROM quota_consumption ORDER BY 1, 2, 3")
    .unwrap();
  let rows_after: Vec<(String, String, i64, f64)> = stmt
    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
    .unwrap()
    .collect::<rusqlite::Result<_>>()
    .unwrap();
  drop(stmt);
  assert_eq!(rows_after, rows_before);
  // Backfilled exactly (values are multiples of 0.25: exact in binary).
  assert_totals_exact(conn, 0.0);
  assert_eq!(totals(conn).len(), brute_totals(conn).len());
  // No duplicate of the host's indexes; its rows and settings untouched.
  let indexes = schema_names(conn, "index");
  assert!(indexes.contains(&"idx_qc_dim".to_string()));
  assert!(!indexes.contains(&"idx_quota_consumption_dimension_bucket".to_string()));
  assert!(!indexes.contains(&"idx_quota_consumption_updated_at".to_string()));
  assert_eq!(db.get_pool("p").unwrap().unwrap().name, "Host");
  assert_eq!(
    db.read_setting("settings", "quotaStore")
      .unwrap()
      .as_deref(),
    Some("{\"driver\":\"sqlite\"}")
  );
  // Reopening is a no-op.
  db.close().unwrap();
  let db = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  assert!(!db.open_report().migrated);
}

/// A file still being copied in (the host's restore copies its backup over the path while
/// the engine may open it): shorter than a header, or than the pages its header vouches
/// for. The engine neither opens nor writes it (no WAL to be replayed over the copy), and
/// opens it once it is whole.
#[test]
fn a_file_still_being_copied_in_is_not_opened() {
  locks::install(); // before this process's first connection, as the host's would be
  let dir = tempfile::tempdir().unwrap();
  let backup = dir.path().join("backup.sqlite");
  {
    let conn = Connection::open(&backup).unwrap();
    conn
      .execute_batch(
        "CREATE TABLE host_rows(v BLOB);
         INSERT INTO host_rows VALUES (zeroblob(20000)), (zeroblob(20000));",
      )
      .unwrap();
  }
  let whole = std::fs::read(&backup).unwrap();
  assert!(whole.len() >= 8 * 4096, "{} bytes", whole.len());
  let path = dir.path().join("storage.sqlite");
  for copied in [50, 4096, whole.len() / 2, whole.len() - 4096] {
    std::fs::write(&path, &whole[..copied]).unwrap();
    let err = SqliteDb::open(&path, &OpenOptions::default()).err();
    let err = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("is not whole yet"), "{copied} bytes: {err:?}");
    assert_eq!(
      std::fs::read(&path).unwrap(),
      &whole[..copied],
      "{copied} bytes"
    );
    assert!(
      !dir.path().join("storage.sqlite-wal").exists(),
      "{copied} bytes"
    );
  }
  std::fs::write(&path, &whole).unwrap();
  let db = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  let rows: i64 = db
    .connection()
    .query_row("SELECT count(*) FROM host_rows", [], |r| r.get(0))
    .unwrap();
  assert_eq!(rows, 2);
}

/// Where the engine had the file before (`existing`), a missing or empty file is a restore
/// under way: no database is made there, and the file is opened once it is back.
#[test]
fn where_the_file_was_a_missing_or_empty_one_is_left_alone() {
  let dir = tempfile::tempdir().unwrap();
  let path = dir.path().join("storage.sqlite");
  let existing = OpenOptions {
    existing: true,
    ..OpenOptions::default()
  };
  assert!(SqliteDb::open(&path, &existing).is_err());
  assert!(!path.exists());
  std::fs::write(&path, b"").unwrap();
  let err = SqliteDb::open(&path, &existing)
    .err()
    .map(|e| e.to_string());
  assert!(err.unwrap_or_default().contains("is not whole yet"));
  assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
  assert!(!dir.path().join("storage.sqlite-wal").exists());
  // A first open makes its database in an empty file.
  let db = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  db.close().unwrap();
  SqliteDb::open(&path, &existing).unwrap();
}

/// A checkpoint held back by a reader's snapshot copies page 1 (its new page count) but
/// not the last page, which the WAL still holds: the file is shorter than its header says,
/// yet whole with its WAL. That is no copy under way.
#[test]
fn a_checkpoint_held_back_by_a_reader_is_no_copy_under_way() {
  let (dir, path) = (tempfile::tempdir().unwrap(), Path::new("storage.sqlite"));
  let path = dir.path().join(path);
  let host = host_conn(&path);
  host
    .execute_batch(
      "PRAGMA wal_autocheckpoint = 0; CREATE TABLE rows(v BLOB);
       INSERT INTO rows VALUES (zeroblob(3000)); PRAGMA wal_checkpoint(TRUNCATE);
       INSERT INTO rows VALUES (zeroblob(3000));",
    )
    .unwrap();
  let reader = host_conn(&path);
  reader
    .execute_batch("BEGIN; SELECT count(*) FROM rows;")
    .unwrap();
  host
    .execute_batch("UPDATE rows SET v = zeroblob(3001) WHERE rowid = 2; PRAGMA wal_checkpoint;")
    .unwrap();
  let bytes = std::fs::read(&path).unwrap();
  let pages = u32::from_be_bytes(bytes[28..32].try_into().unwrap()) as usize;
  assert!(
    bytes.len() < pages * 4096,
    "{} bytes, {pages} pages",
    bytes.len()
  );

  let existing = OpenOptions {
    existing: true,
    ..OpenOptions::default()
  };
  SqliteDb::open(&path, &existing).unwrap();
  // Nor is a database in memory a file that went away.
  SqliteDb::open(Path::new(":memory:"), &OpenOptions::default()).unwrap();
}
