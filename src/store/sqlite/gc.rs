//! Retention of `quota_consumption` (docs/contract.md §4, docs/sqlite.md#retention) and the
//! reconciliation of `quota_consumption_totals`.
//!
//! Deletes run in chunks, each its own short statement, so a large sweep never holds the
//! write lock for long; the delete trigger subtracts them from the totals. Totals rows are
//! never dropped on their own: `sumPoolDimension` accepts any bucket index.
//!
//! [`SqliteDb::reconcile_totals`] rewrites the totals rows that differ from their rows'
//! sum: incremental float sums drift in the last bits (usd), and a writer using
//! `INSERT OR REPLACE` without `recursive_triggers` skips the delete trigger.

use super::inspect::{poisoned_counters, PoisonedCounters, POISONED_ROWS};
use super::values::{exec, rows};
use super::{SqliteDb, StoreContext};
use crate::error::Result;
use crate::store::validate;
use rusqlite::{params, Transaction, TransactionBehavior};

/// Rows deleted per statement.
pub const GC_CHUNK: usize = 1000;
/// Totals rows recomputed per write transaction.
pub const RECONCILE_BATCH: usize = 64;
const DAY_MS: f64 = 86_400_000.0;

/// Where [`SqliteDb::reconcile_totals_batch`] stopped: the last `(dimension_key,
/// bucket_index)` it handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TotalsCursor {
  pub dimension_key: String,
  pub bucket_index: i64,
}

const KEYS_FIRST: &str = "
  SELECT dimension_key, bucket_index FROM quota_consumption_totals
  UNION
  SELECT dimension_key, bucket_index FROM quota_consumption
  WHERE dimension_key IS NOT NULL AND bucket_index IS NOT NULL
  ORDER BY 1, 2 LIMIT ?1";

const KEYS_AFTER: &str = "
  SELECT dimension_key, bucket_index FROM quota_consumption_totals
  WHERE (dimension_key, bucket_index) > (?2, ?3)
  UNION
  SELECT dimension_key, bucket_index FROM quota_consumption
  WHERE dimension_key IS NOT NULL AND bucket_index IS NOT NULL
    AND (dimension_key, bucket_index) > (?2, ?3)
  ORDER BY 1, 2 LIMIT ?1";

const RECOMPUTE: &str = "
  INSERT INTO quota_consumption_totals (dimension_key, bucket_index, consumed, row_count)
  SELECT ?1, ?2, coalesce(SUM(max(min(coalesce(consumed, 0) + 0, 1e15), -1e15)), 0), COUNT(*)
  FROM quota_consumption WHERE dimension_key = ?1 AND bucket_index = ?2
  ON CONFLICT (dimension_key, bucket_index) DO UPDATE SET
    consumed = excluded.consumed, row_count = excluded.row_count
  WHERE consumed IS NOT excluded.consumed OR row_count IS NOT excluded.row_count";

const DROP_EMPTY: &str = "
  DELETE FROM quota_consumption_totals
  WHERE dimension_key = ?1 AND bucket_index = ?2 AND row_count <= 0";

impl SqliteDb {
  /// Deletes at most `chunk` rows with `updated_at < max_updated_at_ms`; returns how many.
  pub fn gc_chunk(&self, max_updated_at_ms: i64, chunk: usize) -> Result<usize> {
    let sql = "DELETE FROM quota_consumption
      WHERE (api_key_id, dimension_key, bucket_index) IN (
        SELECT api_key_id, dimension_key, bucket_index FROM quota_consumption
        WHERE updated_at < ?1 LIMIT ?2)";
    exec(&self.conn, sql, params![max_updated_at_ms, chunk as i64]).ctx("deleting old counters")
  }

  /// `gcOlderThan(maxUpdatedAtMs)`: deletes every row with `updated_at` strictly older;
  /// returns how many.
  pub fn gc_older_than(&self, max_updated_at_ms: i64) -> Result<usize> {
    let mut total = 0;
    loop {
      let n = self.gc_chunk(max_updated_at_ms, GC_CHUNK)?;
      total += n;
      if n < GC_CHUNK {
        return Ok(total);
      }
    }
  }

  /// `gcConsumption()`: deletes rows not updated for `retention_days` (> 0) before
  /// `now_ms`; returns how many.
  pub fn gc_consumption(&self, retention_days: f64, now_ms: i64) -> Result<usize> {
    let cutoff = retention_cutoff(retention_days, now_ms)?;
    self.gc_reservations(now_ms)?;
    self.gc_older_than(cutoff)
  }

  /// Deletes the reservations that expired before `now_ms` (never settled nor released:
  /// docs/admission.md); returns how many rows.
  pub fn gc_reservations(&self, now_ms: i64) -> Result<usize> {
    let sql = "DELETE FROM quota_reservations WHERE expires_at < ?1";
    exec(&self.conn, sql, [now_ms]).ctx("deleting expired reservations")
  }

  /// Recomputes up to `batch` totals rows after `after` (from the start when `None`) in
  /// one write transaction, rewriting those that differ from their rows' sum. Returns how
  /// many were rewritten and where to continue (`None` when done).
  pub fn reconcile_totals_batch(
    &self,
    after: Option<&TotalsCursor>,
    batch: usize,
  ) -> Result<(usize, Option<TotalsCursor>)> {
    let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
      .ctx("starting the totals reconciliation")?;
    let limit = batch.max(1) as i64;
    let map = |row: &rusqlite::Row<'_>| row.try_into();
    let keys: Vec<(String, i64)> = match after {
      None => rows(&tx, KEYS_FIRST, params![limit], map),
      Some(c) => rows(
        &tx,
        KEYS_AFTER,
        params![limit, c.dimension_key, c.bucket_index],
        map,
      ),
    }
    .ctx("listing totals")?;
    let mut fixed = 0;
    for (key, bucket) in &keys {
      let changed = exec(&tx, RECOMPUTE, params![key, bucket]).ctx("recomputing totals")?;
      let dropped = exec(&tx, DROP_EMPTY, params![key, bucket]).ctx("recomputing totals")?;
      if changed > 0 || dropped > 0 {
        fixed += 1;
      }
    }
    tx.commit().ctx("committing the totals reconciliation")?;
    let next = (keys.len() as i64 >= limit)
      .then(|| keys.last().cloned())
      .flatten()
      .map(|(dimension_key, bucket_index)| TotalsCursor {
        dimension_key,
        bucket_index,
      });
    Ok((fixed, next))
  }

  /// Every totals row recomputed from its rows (see the module documentation); returns how
  /// many were rewritten.
  pub fn reconcile_totals(&self) -> Result<usize> {
    let mut fixed = 0;
    let mut cursor = None;
    loop {
      let (n, next) = self.reconcile_totals_batch(cursor.as_ref(), RECONCILE_BATCH)?;
      fixed += n;
      cursor = next;
      if cursor.is_none() {
        return Ok(fixed);
      }
    }
  }

  /// Repairs values poisoned by older versions or other writers (docs/reliability.md,
  /// "Finite counters"): every counter row outside `0..=COUNTER_MAX` is saturated into it
  /// (Infinity → 1e15, negative → 0, non-numeric text → its numeric value or 0), then every
  /// totals row is recomputed from its rows. Returns what was found before the repair.
  /// `quota-engine doctor --repair`.
  pub fn repair_counters(&self) -> Result<PoisonedCounters> {
    let found = poisoned_counters(&self.conn)?;
    self.flush_pending(false)?;
    let sql = format!(
      "UPDATE quota_consumption SET consumed = max(min(coalesce(consumed, 0) + 0, 1e15), 0)
       WHERE {POISONED_ROWS}"
    );
    self.conn.execute(&sql, []).ctx("repairing counters")?;
    // A totals row the triggers cannot mend (Infinity from an older version, or
    // negative) differs from its rows' saturated sum: the reconciliation rewrites it.
    self.reconcile_totals()?;
    Ok(found)
  }
}

/// `now − days`, in ms; `days` must be finite and > 0 (`retentionDays`).
pub(crate) fn retention_cutoff(retention_days: f64, now_ms: i64) -> Result<i64> {
  validate::positive(retention_days, "retentionDays")?;
  Ok(now_ms.saturating_sub((retention_days * DAY_MS).min(i64::MAX as f64) as i64))
}
