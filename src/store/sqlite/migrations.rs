//! `migrations/*.sql`, embedded in the binary and applied idempotently (docs/contract.md §5).
//!
//! Every object is `CREATE … IF NOT EXISTS`, so a fresh file gets the whole schema and a
//! file the host already migrated keeps its tables and rows. Before taking a write lock the
//! runner checks `sqlite_master` (a read): when every object exists, opening writes
//! nothing. An index counts as present when the table already has one on the same columns
//! under another name (the host's own), so no duplicate index is added.
//!
//! When a `quota_consumption_totals` trigger is created on a file, the totals are rebuilt in
//! the same transaction (docs/sqlite.md#pool-totals-in-constant-time): rows written before,
//! or while a trigger was missing, count exactly once.
//!
//! A trigger can be redefined by a later file (`DROP TRIGGER IF EXISTS name;` then its new
//! `CREATE TRIGGER IF NOT EXISTS name`): the last definition of a name is the one
//! expected, a trigger whose stored text differs from it counts as missing, and applying
//! it runs that file's `DROP` first. Earlier definitions of the name are skipped. An older
//! engine that opens the file later finds its trigger by name and leaves it alone.

use super::values::rows_once;
use super::StoreContext;
use crate::error::{QuotaError, Result};
use rusqlite::Connection;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// `(name, text)` of each file of `migrations/` named.
macro_rules! migrations {
  ($($name:literal),* $(,)?) => {
    &[$(($name, include_str!(concat!("../../../migrations/", $name)))),*]
  };
}
/// The migration files, in order.
pub const MIGRATIONS: &[(&str, &str)] = migrations![
  "0001_quota_consumption.sql",
  "0002_quota_pools.sql",
  "0003_provider_plans.sql",
  "0004_quota_allocation_model_caps.sql",
  "0005_key_value.sql",
  "0006_quota_consumption_totals.sql",
  "0007_quota_metadata_version.sql",
  "0008_quota_consumption_totals_saturating.sql",
  "0009_quota_data_version.sql",
  "0010_quota_reservations.sql",
  "0011_quota_consumption_pool_listing.sql",
  "0012_quota_groups.sql",
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
  SELECT dimension_key, bucket_index,
    SUM(max(min(coalesce(consumed, 0) + 0, 1e15), -1e15)), COUNT(*)
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
  /// The migration file it is in.
  file: &'static str,
  sql: String,
  /// The schema object a `CREATE … IF NOT EXISTS` makes; `None` for other statements,
  /// which run whenever the migrations run.
  object: Option<(ObjectKind, String)>,
  /// The trigger a `DROP TRIGGER IF EXISTS name` removes: run only when that trigger is
  /// missing or outdated (just before its new definition).
  drops: Option<String>,
  /// A `CREATE` that a later file redefines: never run, never checked.
  superseded: bool,
}

fn statements() -> &'static [Statement] {
  static PARSED: OnceLock<Vec<Statement>> = OnceLock::new();
  PARSED.get_or_init(|| {
    let mut all: Vec<Statement> = MIGRATIONS
      .iter()
      .flat_map(|(file, sql)| {
        split_statements(sql)
          .into_iter()
          .map(move |sql| (*file, sql))
      })
      .map(|(file, sql)| Statement {
        file,
        object: parse_object(&sql),
        drops: parse_drop_trigger(&sql),
        superseded: false,
        sql,
      })
      .collect();
    mark_superseded(&mut all);
    all
  })
}

/// The triggers that bump a version row (`quota_metadata_version`, `quota_data_version`)
/// whenever an engine table changes: what the hot path's skip over unrelated commits
/// relies on (`hot.rs`).
pub(crate) fn version_triggers() -> &'static [String] {
  static NAMES: OnceLock<Vec<String>> = OnceLock::new();
  NAMES.get_or_init(|| {
    statements()
      .iter()
      .filter(|s| !s.superseded)
      .filter(|s| s.sql.contains("quota_metadata_version") || s.sql.contains("quota_data_version"))
      .filter_map(|s| match &s.object {
        Some((ObjectKind::Trigger, name)) => Some(name.clone()),
        _ => None,
      })
      .collect()
  })
}

/// Marks every `CREATE` of a name that a later statement creates again.
fn mark_superseded(all: &mut [Statement]) {
  let mut seen = HashSet::new();
  for statement in all.iter_mut().rev() {
    if let Some((_, name)) = &statement.object {
      if !seen.insert(name.clone()) {
        statement.superseded = true;
      }
    }
  }
}

/// The first `n` words of `sql`, and the same upper-cased; `None` when it has fewer.
fn leading_words(sql: &str, n: usize) -> Option<(Vec<&str>, Vec<String>)> {
  let words: Vec<&str> = sql.split_whitespace().take(n).collect();
  let upper = words.iter().map(|w| w.to_ascii_uppercase()).collect();
  (words.len() == n).then_some((words, upper))
}

/// `DROP TRIGGER IF EXISTS name;` → the trigger's name.
fn parse_drop_trigger(sql: &str) -> Option<String> {
  let (words, upper) = leading_words(sql, 5)?;
  (upper[..4] == ["DROP", "TRIGGER", "IF", "EXISTS"])
    .then(|| words[4].trim_end_matches(';').to_string())
}

/// A trigger's definition after its name, whitespace collapsed, lower case, without the
/// final `;`: how SQLite keeps it in `sqlite_master.sql` (which drops `IF NOT EXISTS`)
/// compares with the migration's text.
fn trigger_body(sql: &str, name: &str) -> String {
  let collapsed = sql.split_whitespace().collect::<Vec<_>>().join(" ");
  let lower = collapsed.to_ascii_lowercase();
  let name = name.to_ascii_lowercase();
  let after = lower
    .find(&format!(" {name} "))
    .map_or(lower.as_str(), |at| &lower[at + name.len() + 2..]);
  after.trim().trim_end_matches(';').trim().to_string()
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
  let (words, upper) = leading_words(sql, 6)?;
  if upper[0] != "CREATE" || upper[2..5] != ["IF", "NOT", "EXISTS"] {
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
  let sql = "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'";
  // `(type, name)` → the stored `sql`.
  let existing: HashMap<(String, String), Option<String>> = rows_once(conn, sql, [], |row| {
    Ok(((row.get(0)?, row.get(1)?), row.get(2)?))
  })
  .ctx("reading the schema")?
  .into_iter()
  .collect();
  let mut missing = HashSet::new();
  for statement in statements() {
    let Some((kind, name)) = &statement.object else {
      continue;
    };
    if statement.superseded {
      continue;
    }
    let stored = |kind: &str, name: &str| existing.get(&(kind.to_string(), name.to_string()));
    let present = match kind {
      ObjectKind::Table => stored("table", name).is_some(),
      ObjectKind::Trigger => stored("trigger", name).is_some_and(|sql| {
        trigger_body(sql.as_deref().unwrap_or(""), name) == trigger_body(&statement.sql, name)
      }),
      ObjectKind::Index { table, columns } => {
        stored("index", name).is_some()
          || (stored("table", table).is_some() && has_index_on(conn, table, columns)?)
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
  let lacking = |file: &str| {
    let created = statements()
      .iter()
      .filter(|s| s.file == file && !s.superseded);
    let names = created.filter_map(|s| s.object.as_ref().map(|(_, name)| name));
    names
      .filter(|name| missing.contains(*name))
      .cloned()
      .collect()
  };
  let status = MIGRATIONS.iter().map(|(file, _)| (*file, lacking(file)));
  Ok(status.collect())
}

/// Whether `table` has a full (not partial) index on exactly `columns`, in order.
fn has_index_on(conn: &Connection, table: &str, columns: &[String]) -> Result<bool> {
  // Each index's columns joined by commas; an expression column (no name) matches none.
  let sql = "SELECT (SELECT group_concat(coalesce(name, char(0)), ',' ORDER BY seqno)
    FROM pragma_index_info(l.name)) FROM pragma_index_list(?1) AS l WHERE l.partial = 0";
  let indexes: Vec<Option<String>> =
    rows_once(conn, sql, [table], |row| row.get(0)).ctx("reading indexes")?;
  let wanted = columns.join(",");
  Ok(
    indexes
      .into_iter()
      .flatten()
      .any(|c| c.eq_ignore_ascii_case(&wanted)),
  )
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
    if statement.superseded {
      continue;
    }
    if let Some(name) = statement
      .object
      .as_ref()
      .map(|(_, n)| n)
      .or(statement.drops.as_ref())
    {
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
  use super::super::values::one;
  use super::*;

  #[test]
  fn every_statement_is_recognised() {
    let all = statements();
    assert!(all.len() > 20);
    for statement in all {
      let sql = statement.sql.trim_start().to_ascii_uppercase();
      if sql.starts_with("CREATE") {
        assert!(statement.object.is_some(), "{}", statement.sql);
      } else if sql.starts_with("DROP") {
        assert!(statement.drops.is_some(), "{}", statement.sql);
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
  fn an_outdated_totals_trigger_is_recreated_and_the_totals_rebuilt() {
    let conn = Connection::open_in_memory().unwrap();
    ensure_schema(&conn).unwrap();
    // The file as version 0006 left it: the old (non-saturating) insert trigger.
    conn
      .execute_batch(
        "DROP TRIGGER quota_consumption_totals_ai;
         CREATE TRIGGER quota_consumption_totals_ai AFTER INSERT ON quota_consumption
         WHEN NEW.dimension_key IS NOT NULL AND NEW.bucket_index IS NOT NULL
         BEGIN
           INSERT INTO quota_consumption_totals (dimension_key, bucket_index, consumed, row_count)
           VALUES (NEW.dimension_key, NEW.bucket_index, coalesce(NEW.consumed, 0), 1)
           ON CONFLICT (dimension_key, bucket_index) DO UPDATE SET
             consumed = consumed + excluded.consumed, row_count = row_count + 1;
         END;
         INSERT INTO quota_consumption VALUES ('a', 'p:tokens:daily', 1, 9e999, 0);
         INSERT INTO quota_consumption VALUES ('b', 'p:tokens:daily', 1, 9e999, 0);",
      )
      .unwrap();
    let total =
      || -> f64 { one(&conn, "SELECT consumed FROM quota_consumption_totals", []).unwrap() };
    assert!(total().is_infinite());
    assert!(missing_objects(&conn)
      .unwrap()
      .contains("quota_consumption_totals_ai"));
    assert!(ensure_schema(&conn).unwrap());
    assert!(missing_objects(&conn).unwrap().is_empty());
    assert_eq!(total(), 2e15);
    // Deleting the poisoned rows works (it failed with NOT NULL: Inf − Inf = NaN).
    conn.execute("DELETE FROM quota_consumption", []).unwrap();
    let left: i64 = one(&conn, "SELECT count(*) FROM quota_consumption_totals", []).unwrap();
    assert_eq!(left, 0);
    // Nothing is outdated once applied: opening again writes nothing.
    assert!(!ensure_schema(&conn).unwrap());
  }
}
