//! `migrations/*.sql`, embedded in the binary and applied idempotently (docs/contract.md §5).
//!
//! Every object is `CREATE … IF NOT EXISTS`, so a fresh file gets the whole schema and a
//! file the host already migrated keeps its tables and rows. Before taking a write lock the
//! runner checks `sqlite_master` (a read): when every object exists, opening writes
//! nothing. An index counts as present when the table already has one on the same columns
//! under another name (the host's own), so no duplicate index is added.
//!
//! The `quota_consumption_totals` triggers keep per-(dimension, bucket) sums. When any of
//! them is created on a file, the totals are rebuilt from `quota_consumption` in the same
//! transaction, so rows written before (or while a trigger was missing) are counted
//! exactly once.

use super::StoreContext;
use crate::error::{QuotaError, Result};
use rusqlite::Connection;
use std::collections::HashSet;
use std::sync::OnceLock;

/// The migration files, in order.
pub const MIGRATIONS: &[(&str, &str)] = &[
  (
    "0001_quota_consumption.sql",
    include_str!("../../../migrations/0001_quota_consumption.sql"),
  ),
  (
    "0002_quota_pools.sql",
    include_str!("../../../migrations/0002_quota_pools.sql"),
  ),
  (
    "0003_provider_plans.sql",
    include_str!("../../../migrations/0003_provider_plans.sql"),
  ),
  (
    "0004_quota_allocation_model_caps.sql",
    include_str!("../../../migrations/0004_quota_allocation_model_caps.sql"),
  ),
  (
    "0005_key_value.sql",
    include_str!("../../../migrations/0005_key_value.sql"),
  ),
  (
    "0006_quota_consumption_totals.sql",
    include_str!("../../../migrations/0006_quota_consumption_totals.sql"),
  ),
  (
    "0007_quota_metadata_version.sql",
    include_str!("../../../migrations/0007_quota_metadata_version.sql"),
  ),
];

/// The triggers that maintain `quota_consumption_totals`.
pub const TOTALS_TRIGGERS: &[&str] = &[
  "quota_consumption_totals_ai",
  "quota_consumption_totals_au",
  "quota_consumption_totals_am",
  "quota_consumption_totals_ad",
];

const REBUILD_TOTALS: &str = "
  DELETE FROM quota_consumption_totals;
  INSERT INTO quota_consumption_totals (dimension_key, bucket_index, consumed, row_count)
  SELECT dimension_key, bucket_index, SUM(coalesce(consumed, 0)), COUNT(*)
  FROM quota_consumption
  WHERE dimension_key IS NOT NULL AND bucket_index IS NOT NULL
  GROUP BY dimension_key, bucket_index;";

#[derive(Debug, Clone, PartialEq, Eq)]
enum ObjectKind {
  Table,
  Index { table: String, columns: Vec<String> },
  Trigger,
}

#[derive(Debug, Clone)]
struct Statement {
  sql: String,
  /// The schema object a `CREATE … IF NOT EXISTS` makes; `None` for other statements,
  /// which run whenever the migrations run.
  object: Option<(ObjectKind, String)>,
}

fn statements() -> &'static [Statement] {
  static PARSED: OnceLock<Vec<Statement>> = OnceLock::new();
  PARSED.get_or_init(|| {
    MIGRATIONS
      .iter()
      .flat_map(|(_, sql)| split_statements(sql))
      .map(|sql| Statement {
        object: parse_object(&sql),
        sql,
      })
      .collect()
  })
}

/// Splits a migration file into statements: one ends at a line ending in `;`, a
/// `CREATE TRIGGER` at a line ending in `END;`. Comment lines are dropped.
fn split_statements(sql: &str) -> Vec<String> {
  let mut out = Vec::new();
  let mut current = String::new();
  for line in sql.lines() {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with("--") {
      continue;
    }
    current.push_str(line);
    current.push('\n');
    let is_trigger = current
      .trim_start()
      .get(..14)
      .is_some_and(|head| head.eq_ignore_ascii_case("CREATE TRIGGER"));
    let upper = trimmed.to_ascii_uppercase();
    let done = if is_trigger {
      upper.ends_with("END;")
    } else {
      upper.ends_with(';')
    };
    if done {
      out.push(std::mem::take(&mut current));
    }
  }
  debug_assert!(
    current.trim().is_empty(),
    "unterminated statement: {current}"
  );
  out
}

/// `CREATE {TABLE|INDEX|TRIGGER} IF NOT EXISTS name …` → the object it creates.
fn parse_object(sql: &str) -> Option<(ObjectKind, String)> {
  let words: Vec<&str> = sql.split_whitespace().collect();
  let upper: Vec<String> = words
    .iter()
    .take(6)
    .map(|w| w.to_ascii_uppercase())
    .collect();
  if upper.len() < 6 || upper[0] != "CREATE" || upper[2..5] != ["IF", "NOT", "EXISTS"] {
    return None;
  }
  let name = words[5].split('(').next()?.to_string();
  let kind = match upper[1].as_str() {
    "TABLE" => ObjectKind::Table,
    "TRIGGER" => ObjectKind::Trigger,
    "INDEX" => {
      let on = sql.to_ascii_uppercase().find(" ON ")?;
      let rest = &sql[on + 4..];
      let open = rest.find('(')?;
      let close = rest.find(')')?;
      ObjectKind::Index {
        table: rest[..open].trim().to_string(),
        columns: rest[open + 1..close]
          .split(',')
          .map(|c| c.trim().to_string())
          .collect(),
      }
    }
    _ => return None,
  };
  Some((kind, name))
}

/// The names of the objects of the migrations that the file lacks.
fn missing_objects(conn: &Connection) -> Result<HashSet<String>> {
  let mut stmt = conn
    .prepare("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    .ctx("reading the schema")?;
  let existing: HashSet<(String, String)> = stmt
    .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
    .ctx("reading the schema")?
    .collect::<rusqlite::Result<_>>()
    .ctx("reading the schema")?;
  let mut missing = HashSet::new();
  for statement in statements() {
    let Some((kind, name)) = &statement.object else {
      continue;
    };
    let present = match kind {
      ObjectKind::Table => existing.contains(&("table".to_string(), name.clone())),
      ObjectKind::Trigger => existing.contains(&("trigger".to_string(), name.clone())),
      ObjectKind::Index { table, columns } => {
        existing.contains(&("index".to_string(), name.clone()))
          || (existing.contains(&("table".to_string(), table.clone()))
            && has_index_on(conn, table, columns)?)
      }
    };
    if !present {
      missing.insert(name.clone());
    }
  }
  Ok(missing)
}

/// For each migration file, the objects it creates that the database lacks (an empty list:
/// applied). Reads only; for diagnostics (`quota-engine doctor`).
pub fn migration_status(conn: &Connection) -> Result<Vec<(&'static str, Vec<String>)>> {
  let missing = missing_objects(conn)?;
  Ok(
    MIGRATIONS
      .iter()
      .map(|(name, sql)| {
        let lacking = split_statements(sql)
          .iter()
          .filter_map(|statement| parse_object(statement))
          .map(|(_, object)| object)
          .filter(|object| missing.contains(object))
          .collect();
        (*name, lacking)
      })
      .collect(),
  )
}

/// Whether `table` has a full (not partial) index on exactly `columns`, in order.
fn has_index_on(conn: &Connection, table: &str, columns: &[String]) -> Result<bool> {
  let mut list = conn
    .prepare("SELECT name FROM pragma_index_list(?1) WHERE partial = 0")
    .ctx("reading indexes")?;
  let names: Vec<String> = list
    .query_map([table], |row| row.get(0))
    .ctx("reading indexes")?
    .collect::<rusqlite::Result<_>>()
    .ctx("reading indexes")?;
  let mut info = conn
    .prepare("SELECT name FROM pragma_index_info(?1) ORDER BY seqno")
    .ctx("reading indexes")?;
  for name in names {
    let indexed: Vec<Option<String>> = info
      .query_map([&name], |row| row.get(0))
      .ctx("reading indexes")?
      .collect::<rusqlite::Result<_>>()
      .ctx("reading indexes")?;
    let same = indexed.len() == columns.len()
      && indexed
        .iter()
        .zip(columns)
        .all(|(a, b)| a.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(b)));
    if same {
      return Ok(true);
    }
  }
  Ok(false)
}

/// Brings the file's schema up to the migrations. Returns whether anything was created.
/// Reads only, unless an object is missing; then one `BEGIN IMMEDIATE` transaction
/// creates what is missing (and rebuilds the totals when a totals trigger was missing).
pub fn ensure_schema(conn: &Connection) -> Result<bool> {
  // Inside a read transaction the migration waits for the next call outside one.
  if !conn.is_autocommit() || missing_objects(conn)?.is_empty() {
    return Ok(false);
  }
  conn
    .execute_batch("BEGIN IMMEDIATE")
    .ctx("starting the migration")?;
  match apply_missing(conn) {
    Ok(()) => {
      conn
        .execute_batch("COMMIT")
        .ctx("committing the migration")?;
      Ok(true)
    }
    Err(e) => {
      let _ = conn.execute_batch("ROLLBACK");
      Err(e)
    }
  }
}

fn apply_missing(conn: &Connection) -> Result<()> {
  // Checked again under the write lock: another process may have migrated meanwhile.
  let missing = missing_objects(conn)?;
  let rebuild_totals = TOTALS_TRIGGERS.iter().any(|t| missing.contains(*t));
  for statement in statements() {
    if let Some((_, name)) = &statement.object {
      if !missing.contains(name) {
        continue;
      }
    }
    conn.execute_batch(&statement.sql).map_err(|e| {
      QuotaError::Store(format!(
        "migration statement failed: {e}\n{}",
        statement.sql
      ))
    })?;
  }
  if rebuild_totals {
    conn
      .execute_batch(REBUILD_TOTALS)
      .ctx("rebuilding quota_consumption_totals")?;
  }
  Ok(())
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn every_statement_is_recognised() {
    let all = statements();
    assert!(all.len() > 20);
    for statement in all {
      let sql = statement.sql.trim_start().to_ascii_uppercase();
      if sql.starts_with("CREATE") {
        assert!(statement.object.is_some(), "{}", statement.sql);
      } else {
        assert!(sql.starts_with("INSERT OR IGNORE"), "{}", statement.sql);
      }
    }
    for trigger in TOTALS_TRIGGERS {
      assert!(all
        .iter()
        .any(|s| matches!(&s.object, Some((ObjectKind::Trigger, n)) if n == trigger)));
    }
  }

  #[test]
  fn migration_status_lists_what_is_missing_per_file() {
    let conn = Connection::open_in_memory().unwrap();
    let before = migration_status(&conn).unwrap();
    assert_eq!(before.len(), MIGRATIONS.len());
    assert!(before.iter().all(|(_, missing)| !missing.is_empty()));
    assert!(before[0].1.contains(&"quota_consumption".to_string()));
    ensure_schema(&conn).unwrap();
    let after = migration_status(&conn).unwrap();
    assert!(
      after.iter().all(|(_, missing)| missing.is_empty()),
      "{after:?}"
    );
  }

  #[test]
  fn parses_index_columns() {
    let (kind, name) = parse_object("CREATE INDEX IF NOT EXISTS idx_x ON t (a, b);").unwrap();
    assert_eq!(name, "idx_x");
    assert_eq!(
      kind,
      ObjectKind::Index {
        table: "t".into(),
        columns: vec!["a".into(), "b".into()]
      }
    );
    assert!(parse_object("INSERT INTO t VALUES (1);").is_none());
  }

  #[test]
  fn splits_multi_line_triggers() {
    let parts = split_statements(
      "-- c\nCREATE TABLE IF NOT EXISTS a (x);\nCREATE TRIGGER IF NOT EXISTS t AFTER INSERT ON a\nBEGIN\n  SELECT 1;\n  SELECT 2;\nEND;\n",
    );
    assert_eq!(parts.len(), 2);
    assert!(parts[1].contains("SELECT 2;"));
  }
}
