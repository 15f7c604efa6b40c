//! Read-only diagnostics for the `quota-engine` CLI (docs/cli.md) (`doctor`, `plans`): where the database
//! is, which of the engine's migrations it has, and the few host rows the CLI shows —
//! without creating the file or applying a migration (the engine's own open does both).
//!
//! When the engine's connection is open on the same file, the queries run on it; otherwise
//! a read-only connection is opened for the call and closed before it returns, after the
//! lock hooks are installed (so it cannot drop a host connection's locks either).

use super::values::rows_once;
use super::{locks, migration_status, SqliteDb, StoreContext};
use crate::error::{QuotaError, Result};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// One migration file and whether the database has every object it creates.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
  /// The file name, e.g. `0001_quota_consumption.sql`.
  pub name: String,
  pub applied: bool,
  /// The tables, indexes and triggers of this file that the database lacks.
  pub missing: Vec<String>,
}

/// How many stored values are outside the finite range (docs/reliability.md, "Finite
/// counters").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PoisonedCounters {
  /// `quota_consumption` rows whose `consumed` is not a number in `0..=1e15`.
  pub rows: i64,
  /// `quota_consumption_totals` rows whose `consumed` is not a number in
  /// `0..=1e15 × row_count`.
  pub totals: i64,
}

/// The counter rows outside the finite range (a NULL reads as 0 and is left alone).
pub(super) const POISONED_ROWS: &str = "
  consumed IS NOT NULL
  AND NOT (typeof(consumed) IN ('integer', 'real') AND consumed BETWEEN 0 AND 1e15)";

/// The totals rows outside the range their rows can sum to.
pub(super) const POISONED_TOTALS: &str = "
  NOT (typeof(consumed) IN ('integer', 'real')
       AND consumed BETWEEN 0 AND 1e15 * max(row_count, 1))";

/// Counts the poisoned rows of both tables.
pub(super) fn poisoned_counters(conn: &Connection) -> Result<PoisonedCounters> {
  let count = |table: &str, filter: &str| -> Result<i64> {
    let sql = format!("SELECT count(*) FROM {table} WHERE {filter}");
    conn
      .query_row(&sql, [], |row| row.get(0))
      .ctx(&format!("counting poisoned rows of {table}"))
  };
  Ok(PoisonedCounters {
    rows: count("quota_consumption", POISONED_ROWS)?,
    totals: count("quota_consumption_totals", POISONED_TOTALS)?,
  })
}

/// A `provider_plans` row, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredPlanRow {
  pub connection_id: String,
  pub provider: String,
  pub source: String,
  /// How many dimensions `dimensions_json` holds (0 when it is not a JSON array).
  pub dimension_count: u32,
}

/// A row of the host's `provider_connections` table (`id`, `provider`), when it has one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostConnection {
  pub id: String,
  pub provider: String,
}

/// What `inspectDatabase` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseInspection {
  pub path: String,
  /// The SQLite library the engine runs.
  pub sqlite_version: String,
  /// `PRAGMA journal_mode` as the file has it (`wal` when the host or the engine set it).
  pub journal_mode: String,
  /// `PRAGMA user_version` (the host's migration runner may use it).
  pub user_version: i64,
  /// Every table in the file, sorted.
  pub tables: Vec<String>,
  pub migrations: Vec<MigrationStatus>,
  /// The raw value of `key_value` (`settings`, `quotaStore`), when the row exists.
  pub quota_store_setting: Option<String>,
  pub plan_rows: Vec<StoredPlanRow>,
  /// The host's connections, when it has a `provider_connections (id, provider)` table.
  pub host_connections: Option<Vec<HostConnection>>,
  /// Rows in `quota_consumption`, when the table exists.
  pub counter_rows: Option<i64>,
  /// Counter and totals rows outside `0..=COUNTER_MAX` (Infinity, negative, non-numeric:
  /// written by an older version or another writer), when both tables exist.
  /// `quota-engine doctor --repair` fixes them ([`super::SqliteDb::repair_counters`]).
  pub poisoned_counters: Option<PoisonedCounters>,
  /// The queries ran on the engine's open connection rather than a connection of their own.
  pub via_engine_connection: bool,
}

fn has_columns(conn: &Connection, table: &str, columns: &[&str]) -> Result<bool> {
  let sql = "SELECT name FROM pragma_table_info(?1)";
  let names: Vec<String> =
    rows_once(conn, sql, [table], |row| row.get(0)).ctx("reading columns")?;
  Ok(columns.iter().all(|c| names.iter().any(|n| n == c)))
}

fn inspect(conn: &Connection, path: &Path, via_engine: bool) -> Result<DatabaseInspection> {
  fn one<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> rusqlite::Result<T> {
    conn.query_row(sql, [], |row| row.get(0))
  }
  let journal_mode: String = one(conn, "PRAGMA journal_mode").ctx("reading journal_mode")?;
  let user_version: i64 = one(conn, "PRAGMA user_version").ctx("reading user_version")?;
  let tables: Vec<String> = rows_once(
    conn,
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    [],
    |row| row.get(0),
  )
  .ctx("reading the schema")?;
  let migrations = migration_status(conn)?
    .into_iter()
    .map(|(name, missing)| MigrationStatus {
      name: name.to_string(),
      applied: missing.is_empty(),
      missing,
    })
    .collect();
  let has = |t: &str| tables.iter().any(|name| name == t);
  let quota_store_setting = if has("key_value") {
    let sql = "SELECT value FROM key_value WHERE namespace = 'settings' AND key = 'quotaStore'";
    let setting: Option<Option<String>> = one(conn, sql).optional().ctx("reading key_value")?;
    setting.flatten()
  } else {
    None
  };
  let plan_rows = if has("provider_plans") {
    let sql = "SELECT connection_id, provider, coalesce(source, 'manual'), \
      CASE WHEN json_valid(dimensions_json) AND json_type(dimensions_json) = 'array' \
      THEN json_array_length(dimensions_json) ELSE 0 END \
      FROM provider_plans ORDER BY connection_id";
    rows_once(conn, sql, [], |row| {
      Ok(StoredPlanRow {
        connection_id: row.get(0)?,
        provider: row.get::<_, Option<String>>(1)?.unwrap_or_default(),
        source: row.get(2)?,
        dimension_count: row.get::<_, i64>(3)?.clamp(0, i64::from(u32::MAX)) as u32,
      })
    })
    .ctx("reading provider_plans")?
  } else {
    Vec::new()
  };
  let host_connections = if has("provider_connections")
    && has_columns(conn, "provider_connections", &["id", "provider"])?
  {
    let sql = "SELECT CAST(id AS TEXT), coalesce(provider, '') FROM provider_connections \
      WHERE id IS NOT NULL ORDER BY 1";
    let read = |row: &rusqlite::Row<'_>| {
      Ok(HostConnection {
        id: row.get(0)?,
        provider: row.get(1)?,
      })
    };
    Some(rows_once(conn, sql, [], read).ctx("reading provider_connections")?)
  } else {
    None
  };
  let counter_rows = if has("quota_consumption") {
    Some(one(conn, "SELECT count(*) FROM quota_consumption").ctx("counting quota_consumption")?)
  } else {
    None
  };
  let poisoned_counters = if has("quota_consumption") && has("quota_consumption_totals") {
    Some(poisoned_counters(conn)?)
  } else {
    None
  };
  Ok(DatabaseInspection {
    poisoned_counters,
    path: path.display().to_string(),
    sqlite_version: rusqlite::version().to_string(),
    journal_mode,
    user_version,
    tables,
    migrations,
    quota_store_setting,
    plan_rows,
    host_connections,
    counter_rows,
    via_engine_connection: via_engine,
  })
}

fn same_file(a: &Path, b: &Path) -> bool {
  match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
    (Ok(a), Ok(b)) => a == b,
    _ => a == b,
  }
}

/// [`inspect_path`] on the engine's open connection `db`: `None` when `db` has another
/// file open.
pub fn inspect_open(db: &SqliteDb, path: &Path) -> Result<Option<DatabaseInspection>> {
  if same_file(db.path(), path) {
    inspect(db.connection(), path, true).map(Some)
  } else {
    Ok(None)
  }
}

/// Reads the database at `path` without writing to it, on a read-only connection of its
/// own: its journal mode, tables, which of the engine's migrations it has, the
/// `quotaStore` setting, the stored plan rows and the host's connections. Never creates
/// the file; a `Store` error when it is missing or not a database.
pub fn inspect_path(path: &Path) -> Result<DatabaseInspection> {
  if std::fs::metadata(path).is_err() {
    return Err(QuotaError::Store(format!(
      "no database at {}",
      path.display()
    )));
  }
  locks::install();
  let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
  let conn = Connection::open_with_flags(path, flags)
    .ctx(&format!("opening {} read-only", path.display()))?;
  conn
    .busy_timeout(Duration::from_millis(2000))
    .ctx("setting busy_timeout")?;
  let found = inspect(&conn, path, false);
  conn
    .close()
    .map_err(|(_, e)| QuotaError::Store(format!("closing: {e}")))?;
  found
}
