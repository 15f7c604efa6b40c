//! The sliding-window counters in `quota_consumption` (docs/contract.md §2, §4) and the host's
//! `db/quotaConsumption.ts` functions on the same table.
//!
//! An increment is one upsert statement that also returns the new `curr` and the `prev`
//! bucket: atomic across threads and processes (SQLite's write lock), committed before it
//! returns, and the value it returns is consistent with the write. Pool totals come from
//! `quota_consumption_totals` (kept by triggers, see the migration), two rows whatever the
//! pool size.

use super::values::{exec, first, i64_of, number, rows, text};
use super::{SqliteDb, StoreContext};
use crate::core::dimensions::{bucket_index, effective, DimensionKey};
use crate::error::{QuotaError, Result};
use crate::store::records::{unit_and_window, ConsumptionRow};
use crate::store::validate;
use rusqlite::{params, Connection};

macro_rules! upsert {
  () => {
    "
  INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at)
  VALUES (?1, ?2, ?3, min(?4, 1e15), ?5)
  ON CONFLICT (api_key_id, dimension_key, bucket_index) DO UPDATE SET
    consumed = min(max(coalesce(consumed, 0), 0) + excluded.consumed, 1e15),
    updated_at = excluded.updated_at"
  };
}

const UPSERT: &str = upsert!();
const UPSERT_RETURNING: &str = concat!(
  upsert!(),
  "
  RETURNING consumed,
    (SELECT consumed FROM quota_consumption
     WHERE api_key_id = ?1 AND dimension_key = ?2 AND bucket_index = ?3 - 1)"
);

const SELECT_PAIR: &str = "
  SELECT
    (SELECT consumed FROM quota_consumption
     WHERE api_key_id = ?1 AND dimension_key = ?2 AND bucket_index = ?3),
    (SELECT consumed FROM quota_consumption
     WHERE api_key_id = ?1 AND dimension_key = ?2 AND bucket_index = ?3 - 1)";

const SELECT_TOTALS_PAIR: &str = "
  SELECT
    (SELECT consumed FROM quota_consumption_totals WHERE dimension_key = ?1 AND bucket_index = ?2),
    (SELECT consumed FROM quota_consumption_totals WHERE dimension_key = ?1 AND bucket_index = ?2 - 1)";

const SELECT_PER_KEY: &str = "
  SELECT api_key_id,
    SUM(CASE WHEN bucket_index = ?2 THEN max(coalesce(consumed, 0), 0) ELSE 0 END),
    SUM(CASE WHEN bucket_index = ?2 - 1 THEN max(coalesce(consumed, 0), 0) ELSE 0 END)
  FROM quota_consumption
  WHERE dimension_key = ?1 AND bucket_index IN (?2, ?2 - 1)
  GROUP BY api_key_id
  ORDER BY api_key_id";

/// Column `i` as a counter: a number, never below 0 (a row an older version or another
/// writer left negative reads as 0; the next write to it starts from 0 too).
fn counter(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<f64> {
  Ok(number(row, i)?.max(0.0))
}

/// The two counters of the one-row statement `sql` (NULL as 0).
fn two_numbers(
  conn: &Connection,
  sql: &str,
  params: impl rusqlite::Params,
) -> rusqlite::Result<(f64, f64)> {
  conn
    .prepare_cached(sql)?
    .query_row(params, |row| Ok((counter(row, 0)?, counter(row, 1)?)))
}

/// `(curr, prev)` of one key and dimension key string, as committed.
pub(super) fn pair(
  conn: &Connection,
  api_key_id: &str,
  dimension_key: &str,
  current: i64,
) -> Result<(f64, f64)> {
  let params = params![api_key_id, dimension_key, current];
  two_numbers(conn, SELECT_PAIR, params).ctx("reading a counter")
}

/// `(curr_total, prev_total)` of a dimension key string, from the totals table, as
/// committed.
pub(super) fn totals_pair(
  conn: &Connection,
  dimension_key: &str,
  current: i64,
) -> Result<(f64, f64)> {
  two_numbers(conn, SELECT_TOTALS_PAIR, params![dimension_key, current]).ctx("reading pool totals")
}

/// Every key's effective value for a dimension key string at `now_ms`.
pub(super) fn per_key(
  conn: &Connection,
  dimension_key: &str,
  window_ms: i64,
  now_ms: i64,
) -> Result<Vec<(String, f64)>> {
  let current = bucket_index(now_ms, window_ms);
  let params = params![dimension_key, current];
  rows(conn, SELECT_PER_KEY, params, |row| {
    let (curr, prev) = (number(row, 1)?, number(row, 2)?);
    Ok((text(row, 0)?, effective(prev, curr, now_ms, window_ms)))
  })
  .ctx("reading counters")
}

impl SqliteDb {
  /// `SqliteQuotaStore.consume` through the record buffer (docs/sqlite.md, "Records are
  /// buffered"): validates, adds `cost` to the buffer and answers the new effective value,
  /// which the buffered read already knows — no transaction of its own; the buffer is
  /// committed with the records, by time. With `max_age` zero (`QUOTA_RECORD_FLUSH_MS=0`)
  /// it commits in its own call, after what is buffered, unless the path (looked up now)
  /// names another file: then it waits in the buffer, like a record.
  pub fn consume_buffered(
    &self,
    api_key_id: &str,
    key: &DimensionKey,
    cost: f64,
    now_ms: i64,
    max_age: std::time::Duration,
  ) -> Result<f64> {
    validate::key(api_key_id, key)?;
    validate::cost(cost, "cost")?;
    if max_age.is_zero() && !self.file_replaced_now() {
      self.flush_before_use();
      return self.consume(api_key_id, key, cost, now_ms);
    }
    self.buffer_one(api_key_id, key, cost, now_ms, max_age);
    self.hot_scope(|db| db.peek(api_key_id, key, now_ms))
  }
}

impl SqliteDb {
  /// Adds `cost` to the current bucket of `(api_key_id, key)` and returns the new
  /// effective value (`prev × (1 − elapsed / window) + curr`), read in the same atomic
  /// operation as the write. Every counter call takes the time as `now_ms` (epoch ms);
  /// invalid input is a `RangeError` naming the field and writes nothing.
  pub fn consume(
    &self,
    api_key_id: &str,
    key: &DimensionKey,
    cost: f64,
    now_ms: i64,
  ) -> Result<f64> {
    validate::key(api_key_id, key)?;
    validate::cost(cost, "cost")?;
    let window_ms = key.window.ms();
    let current = bucket_index(now_ms, window_ms);
    let dimension_key = key.to_string();
    let mut stmt = self
      .conn
      .prepare_cached(UPSERT_RETURNING)
      .ctx("consuming")?;
    let mut rows = stmt
      .query(params![api_key_id, dimension_key, current, cost, now_ms])
      .ctx("consuming")?;
    let (curr, prev) = match rows.next().ctx("consuming")? {
      Some(row) => (
        counter(row, 0).ctx("consuming")?,
        counter(row, 1).ctx("consuming")?,
      ),
      None => {
        return Err(QuotaError::Store(
          "consuming: the upsert returned no row".into(),
        ))
      }
    };
    // Step to the end: outside a transaction the statement's implicit COMMIT runs there,
    // and its failure (a full disk, an I/O error) must reach the caller. `query_row`
    // stops after the RETURNING row and the reset drops that error: the write was lost
    // while `consume` resolved with the value it would have had.
    if rows.next().ctx("committing")?.is_some() {
      return Err(QuotaError::Store(
        "consuming: the upsert returned two rows".into(),
      ));
    }
    let (curr, prev) =
      self.with_pending_key(api_key_id, dimension_key.as_str(), current, (curr, prev));
    Ok(effective(prev, curr, now_ms, window_ms))
  }

  /// The effective value of `(api_key_id, key)` at `now_ms`, without writing.
  pub fn peek(&self, api_key_id: &str, key: &DimensionKey, now_ms: i64) -> Result<f64> {
    validate::key(api_key_id, key)?;
    let window_ms = key.window.ms();
    let pair = self.key_pair_now(api_key_id, key, bucket_index(now_ms, window_ms))?;
    Ok(pair.effective(now_ms, window_ms))
  }

  /// The sliding formula applied to the sums of `curr` and `prev` over every API key with
  /// this dimension key. Costs the same however many keys the pool has.
  pub fn pool_consumed_total(&self, key: &DimensionKey, now_ms: i64) -> Result<f64> {
    validate::non_empty(&key.pool_id, "dim.poolId")?;
    let window_ms = key.window.ms();
    let totals = self.totals_pair_now(key, bucket_index(now_ms, window_ms))?;
    Ok(totals.effective(now_ms, window_ms))
  }

  /// Zeroes the counter of `(api_key_id, key)` (every bucket: `curr` and `prev` at any time).
  pub fn clear(&self, api_key_id: &str, key: &DimensionKey) -> Result<()> {
    validate::key(api_key_id, key)?;
    let dimension_key = key.to_string();
    let sql = "DELETE FROM quota_consumption WHERE api_key_id = ?1 AND dimension_key = ?2";
    exec(&self.conn, sql, params![api_key_id, dimension_key]).ctx("clearing a counter")?;
    // Buffered records of the counter go too (they are still buffered when a flush failed
    // just before), or they would bring it back.
    self.discard_pending_counter(api_key_id, &dimension_key);
    Ok(())
  }

  /// The effective value of every API key with a row for `key` in `curr` or `prev`.
  pub fn per_key_effective(&self, key: &DimensionKey, now_ms: i64) -> Result<Vec<(String, f64)>> {
    validate::non_empty(&key.pool_id, "dim.poolId")?;
    per_key(&self.conn, &key.to_string(), key.window.ms(), now_ms)
  }
}

impl SqliteDb {
  /// `getBucket(apiKeyId, dimensionKey, bucketIndex)`: the bucket's value, 0 when absent.
  pub fn get_bucket(&self, api_key_id: &str, dimension_key: &str, bucket: i64) -> Result<f64> {
    let sql = "SELECT consumed FROM quota_consumption
      WHERE api_key_id = ?1 AND dimension_key = ?2 AND bucket_index = ?3";
    let params = params![api_key_id, dimension_key, bucket];
    let value = first(&self.conn, sql, params, |row| counter(row, 0)).ctx("reading a bucket")?;
    let stored = (value.unwrap_or(0.0), 0.0);
    let (curr, _) = self.with_pending_key(api_key_id, dimension_key, bucket, stored);
    Ok(curr)
  }

  /// `incrementBucket(apiKeyId, dimensionKey, bucketIndex, delta, nowMs)`: one atomic
  /// upsert adding `delta` (finite, >= 0: a negative one could take a counter and the pool
  /// total below 0) and setting `updated_at = now_ms`; the bucket saturates at
  /// [`validate::COUNTER_MAX`].
  pub fn increment_bucket(
    &self,
    api_key_id: &str,
    dimension_key: &str,
    bucket: i64,
    delta: f64,
    now_ms: i64,
  ) -> Result<()> {
    validate::non_empty(api_key_id, "apiKeyId")?;
    validate::non_empty(dimension_key, "dimensionKey")?;
    validate::cost(delta, "delta")?;
    let params = params![api_key_id, dimension_key, bucket, delta, now_ms];
    exec(&self.conn, UPSERT, params).ctx("incrementing a bucket")?;
    Ok(())
  }

  /// `getPair(apiKeyId, dimensionKey, currentBucket)` → `(curr, prev)`, read together
  /// (buffered records included).
  pub fn get_pair(
    &self,
    api_key_id: &str,
    dimension_key: &str,
    current: i64,
  ) -> Result<(f64, f64)> {
    let stored = pair(&self.conn, api_key_id, dimension_key, current)?;
    Ok(self.with_pending_key(api_key_id, dimension_key, current, stored))
  }

  /// `sumPoolDimension(dimensionKey, currentBucket)` → `(currTotal, prevTotal)` over every
  /// API key, read together from the totals table.
  pub fn sum_pool_dimension(&self, dimension_key: &str, current: i64) -> Result<(f64, f64)> {
    // A dropped totals trigger (a recreated table) shows as a schema change: re-applied
    // here, with the totals rebuilt, before they are read.
    self.refresh_cache()?;
    let stored = totals_pair(&self.conn, dimension_key, current)?;
    Ok(self.with_pending_totals(dimension_key, current, stored))
  }

  /// `listConsumptionForPool(poolId, limit)`: the pool's rows (dimension keys starting
  /// with `"<poolId>:"`, model-cap buckets `"<poolId>:model:…"` included), newest
  /// `updated_at` first, `limit` clamped to 1..=500. The prefix is matched as a byte range
  /// (`>= "<poolId>:"` and `< "<poolId>;"`), so `%` or `_` in a pool id match themselves
  /// and the match is case-sensitive.
  ///
  /// Each way below answers exactly the full sort's page (docs/sqlite.md#listing-a-pools-rows).
  pub fn list_consumption_for_pool(
    &self,
    pool_id: &str,
    limit: i64,
  ) -> Result<Vec<ConsumptionRow>> {
    let limit = limit.clamp(1, 500);
    let low = format!("{pool_id}:");
    let high = format!("{pool_id};");
    // A short walk of the table's newest rows (the pool is most of the table), else each
    // dimension key from its index, else (no such index) a longer walk, else a sort.
    let window = self.listing_window(&low, &high, limit).ok().flatten();
    if let Some(window) = window.filter(|w| *w <= LIST_SHORT_WALK) {
      if let Ok(Some(rows)) = self.list_newest_within(&low, &high, limit, window) {
        return Ok(rows);
      }
    }
    if let Ok(rows) = self.list_newest_per_dimension(&low, &high, limit) {
      return Ok(rows);
    }
    if let Some(window) = window.filter(|w| *w > LIST_SHORT_WALK) {
      if let Ok(Some(rows)) = self.list_newest_within(&low, &high, limit, window) {
        return Ok(rows);
      }
    }
    let params = params![low, high, limit];
    rows(&self.conn, LIST_POOL_SORTED, params, consumption_row).ctx("listing consumption")
  }

  /// How many of the table's newest rows to walk for a page of the pool, or `None` when
  /// sorting the pool's rows is expected to cost less. The pool's rows are counted from
  /// `quota_consumption_totals` (one row per dimension key and bucket), the table's
  /// estimated by its largest rowid; a random row read costs about three in order.
  fn listing_window(&self, low: &str, high: &str, limit: i64) -> rusqlite::Result<Option<i64>> {
    let sizes: (Option<i64>, Option<i64>) = self
      .conn
      .prepare_cached(LIST_SIZES)?
      .query_row(params![low, high], |row| row.try_into())?;
    let (pool_rows, table_rows) = (sizes.0.unwrap_or(0), sizes.1.unwrap_or(0));
    if pool_rows <= 0 {
      return Ok(None);
    }
    let expected = limit.saturating_mul(table_rows.max(pool_rows)) / pool_rows;
    Ok(
      (expected <= LIST_MAX_WINDOW && expected.saturating_mul(3) <= pool_rows)
        .then(|| expected.saturating_mul(2).clamp(1_024, LIST_MAX_WINDOW)),
    )
  }

  /// Each of the pool's dimension keys (a handful, each found by one seek) read newest
  /// first from `idx_quota_consumption_dimension_updated` (migration 0011), `limit` rows
  /// each, merged in the listing's order. An error when the index is missing.
  fn list_newest_per_dimension(
    &self,
    low: &str,
    high: &str,
    limit: i64,
  ) -> rusqlite::Result<Vec<ConsumptionRow>> {
    let mut dimension_keys = Vec::new();
    let mut key: Option<String> = self
      .conn
      .prepare_cached(POOL_FIRST_DIMENSION)?
      .query_row(params![low, high], |row| row.get(0))?;
    let mut next = self.conn.prepare_cached(POOL_NEXT_DIMENSION)?;
    while let Some(k) = key {
      key = next.query_row(params![k, high], |row| row.get(0))?;
      dimension_keys.push(k);
    }
    let mut stmt = self.conn.prepare_cached(DIMENSION_NEWEST_ROWS)?;
    // Each row with whether its updated_at is NULL (it reads as 0, as the rows have always
    // reported it, but sorts after every time, as SQL's ORDER BY … DESC puts it).
    let mut rows: Vec<(bool, ConsumptionRow)> = Vec::new();
    for dimension_key in &dimension_keys {
      let found = stmt.query_map(params![dimension_key, limit], |row| {
        Ok((
          row.get::<_, Option<i64>>(4)?.is_none(),
          consumption_row(row)?,
        ))
      })?;
      for row in found {
        rows.push(row?);
      }
    }
    // ORDER BY updated_at DESC, bucket_index DESC, dimension_key, api_key_id.
    rows.sort_by(|(a_null, a), (b_null, b)| {
      a_null
        .cmp(b_null)
        .then(b.updated_at.cmp(&a.updated_at))
        .then(b.bucket_index.cmp(&a.bucket_index))
        .then_with(|| a.dimension_key.cmp(&b.dimension_key))
        .then_with(|| a.api_key_id.cmp(&b.api_key_id))
    });
    rows.truncate(limit as usize);
    Ok(rows.into_iter().map(|(_, row)| row).collect())
  }

  /// The pool's newest `limit` rows among the rows newer than the table's `window`-th
  /// newest, or `None` when fewer than `limit` are.
  fn list_newest_within(
    &self,
    low: &str,
    high: &str,
    limit: i64,
    window: i64,
  ) -> rusqlite::Result<Option<Vec<ConsumptionRow>>> {
    let floor: Option<i64> = first(&self.conn, LIST_FLOOR, [window - 1], |row| row.get(0))?;
    let params = params![low, high, floor.unwrap_or(i64::MIN), limit];
    let rows = rows(&self.conn, LIST_NEWEST, params, consumption_row)?;
    // Rows at or below the floor (and NULL ones, which sort last) were not walked: only a
    // full page is certainly the newest.
    Ok((rows.len() as i64 == limit).then_some(rows))
  }
}

/// How far back `listConsumptionForPool` walks the table's newest rows at most.
const LIST_MAX_WINDOW: i64 = 16_384;

/// `listConsumptionForPool`: the pool's first dimension key (`?1` its prefix, `?2` the end
/// of the range): one seek of the (dimension_key, bucket_index) index.
const POOL_FIRST_DIMENSION: &str = "
  SELECT min(dimension_key) FROM quota_consumption
  WHERE dimension_key >= ?1 AND dimension_key < ?2";

/// `listConsumptionForPool`: the pool's next dimension key after `?1`, below `?2`.
const POOL_NEXT_DIMENSION: &str = "
  SELECT min(dimension_key) FROM quota_consumption
  WHERE dimension_key > ?1 AND dimension_key < ?2";

/// `listConsumptionForPool`: one dimension key's newest `?2` rows, read backwards from
/// `idx_quota_consumption_dimension_updated` (migration 0011).
const DIMENSION_NEWEST_ROWS: &str = "
  SELECT api_key_id, dimension_key, bucket_index, consumed, updated_at
  FROM quota_consumption INDEXED BY idx_quota_consumption_dimension_updated
  WHERE dimension_key = ?1
  ORDER BY updated_at DESC, bucket_index DESC, api_key_id
  LIMIT ?2";

/// A walk of the table's newest rows this short (the pool is most of the table) beats
/// reading each of the pool's dimension keys from its index.
const LIST_SHORT_WALK: i64 = 2_048;

/// The pool's rows (from the totals) and the table's (its largest rowid, an upper bound).
const LIST_SIZES: &str = "
  SELECT
    (SELECT sum(row_count) FROM quota_consumption_totals
     WHERE dimension_key >= ?1 AND dimension_key < ?2),
    (SELECT max(rowid) FROM quota_consumption)";

/// The `updated_at` of the table's `?1 + 1`-th newest row (from the index alone).
const LIST_FLOOR: &str = "
  SELECT updated_at FROM quota_consumption INDEXED BY idx_quota_consumption_updated_at
  WHERE updated_at IS NOT NULL
  ORDER BY updated_at DESC LIMIT 1 OFFSET ?1";

/// The pool's newest rows above `?3`, walking `idx_quota_consumption_updated_at` backwards.
const LIST_NEWEST: &str = "
  SELECT api_key_id, dimension_key, bucket_index, consumed, updated_at
  FROM quota_consumption INDEXED BY idx_quota_consumption_updated_at
  WHERE updated_at > ?3 AND dimension_key >= ?1 AND dimension_key < ?2
  ORDER BY updated_at DESC, bucket_index DESC, dimension_key, api_key_id
  LIMIT ?4";

/// Every row of the pool, sorted.
const LIST_POOL_SORTED: &str = "
  SELECT api_key_id, dimension_key, bucket_index, consumed, updated_at
  FROM quota_consumption
  WHERE dimension_key >= ?1 AND dimension_key < ?2
  ORDER BY updated_at DESC, bucket_index DESC, dimension_key, api_key_id
  LIMIT ?3";

fn consumption_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ConsumptionRow> {
  let dimension_key = text(row, 1)?;
  let (unit, window) = unit_and_window(&dimension_key);
  Ok(ConsumptionRow {
    api_key_id: text(row, 0)?,
    unit: unit.to_string(),
    window: window.to_string(),
    bucket_index: i64_of(row.get_ref(2)?).unwrap_or(0),
    consumed: number(row, 3)?,
    updated_at: i64_of(row.get_ref(4)?).unwrap_or(0),
    dimension_key,
  })
}

impl SqliteDb {
  /// `recordConsumption`'s write: several `(dimension key, cost)` of one API key, all in
  /// one IMMEDIATE transaction (all or nothing), committed before it returns — or in the
  /// caller's transaction when one is open ([`SqliteDb::write_scope`]).
  pub fn consume_many(
    &self,
    api_key_id: &str,
    writes: &[(DimensionKey, f64)],
    now_ms: i64,
  ) -> Result<()> {
    validate::writes(api_key_id, writes)?;
    self.in_write(|tx| {
      let mut stmt = tx.prepare_cached(UPSERT).ctx("consuming")?;
      for (key, cost) in writes {
        let current = bucket_index(now_ms, key.window.ms());
        stmt
          .execute(params![api_key_id, key.to_string(), current, cost, now_ms])
          .ctx("consuming")?;
      }
      Ok(())
    })
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::store::sqlite::temp_db;

  type Row = (String, String, i64, i64);

  fn reference(db: &SqliteDb, pool: &str, limit: i64) -> Vec<Row> {
    let params = params![format!("{pool}:"), format!("{pool};"), limit];
    rows(db.connection(), LIST_POOL_SORTED, params, |r| {
      let updated_at: Option<i64> = r.get(4)?;
      Ok((r.get(0)?, r.get(1)?, r.get(2)?, updated_at.unwrap_or(0)))
    })
    .unwrap()
  }

  fn listed(db: &SqliteDb, pool: &str, limit: i64) -> Vec<Row> {
    db.list_consumption_for_pool(pool, limit)
      .unwrap()
      .into_iter()
      .map(|r| (r.api_key_id, r.dimension_key, r.bucket_index, r.updated_at))
      .collect()
  }

  /// Whatever share of the table the pool is (so each way of answering runs: a full page
  /// from the walk, a walk that finds too few, the pool sorted at once), with many ties
  /// and NULL `updated_at`s, the listing is exactly the full sort's.
  #[test]
  fn listing_a_pool_matches_the_full_sort_at_any_share_of_the_table() {
    for (share, rows) in [
      (90u64, 3_000u64),
      (40, 20_000),
      (5, 40_000),
      (1, 40_000),
      (0, 20_000),
    ] {
      let (_dir, db) = temp_db();
      let tx = db.connection().unchecked_transaction().unwrap();
      let mut seed = 7u64 + share;
      for i in 0..rows {
        seed = seed
          .wrapping_mul(6364136223846793005)
          .wrapping_add(1442695040888963407);
        let in_pool = (seed >> 40) % 100 < share || i.is_multiple_of(2_000);
        let dim = if in_pool {
          [
            "p:tokens:5h",
            "p:requests:daily",
            "p:model:m:requests:hourly",
          ][(seed >> 33) as usize % 3]
        } else {
          ["q:tokens:5h", "p2:tokens:5h", "o:requests:daily"][(seed >> 33) as usize % 3]
        };
        // Many ties; the pool's rows older than the rest when its share is small, and at
        // 40 % (so the walk of the newest rows finds too few and the pool is sorted).
        let older = (share < 5 || share == 40) && in_pool;
        let updated_at = ((seed >> 20) % 400) as i64 - if older { 1_000 } else { 0 };
        let updated_at = Some(updated_at).filter(|_| !(seed >> 8).is_multiple_of(97));
        tx.execute(
          "INSERT OR IGNORE INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?1, ?2, ?3, 1, ?4)",
          params![format!("k{}", i % 5_003), dim, ((seed >> 10) % 3) as i64, updated_at],
        )
        .unwrap();
      }
      tx.commit().unwrap();
      for limit in [1, 7, 100, 500] {
        assert_eq!(
          listed(&db, "p", limit),
          reference(&db, "p", limit),
          "share {share}%, limit {limit}"
        );
      }
      assert!(listed(&db, "nothing", 500).is_empty());
    }
  }

  /// Issue 15 item 9: listing a pool does work bounded by the page, not by the pool,
  /// whether it is most of the table (60 000 of 75 000 rows: the walk of the newest rows)
  /// or a small share (3 750 of 75 000, in three dimension keys: the per-key index) —
  /// counted in SQLite VM instructions (deterministic); the old query sorted every one of
  /// the pool's rows.
  #[test]
  fn listing_a_busy_pool_does_not_sort_the_pool() {
    listing_costs_less_than(4, 200_000);
  }

  #[test]
  fn listing_a_small_pool_of_a_big_table_does_not_sort_the_pool() {
    listing_costs_less_than(1, 200_000);
  }

  /// `in_pool` of every 5 rows of 75 000 are the pool's (spread over 3 dimension keys).
  fn listing_costs_less_than(in_pool: i64, limit: u64) {
    let (_dir, mut db) = temp_db();
    let tx = db.connection().unchecked_transaction().unwrap();
    for i in 0..75_000i64 {
      let dim = if i % 5 >= in_pool {
        "other:tokens:5h"
      } else if in_pool == 1 && i % 20 < 15 {
        ["p:tokens:5h", "p:requests:daily", "p:usd:weekly"][(i % 20 / 5) as usize]
      } else {
        "p:tokens:5h"
      };
      tx.execute(
        "INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?1, ?2, 1, 1, ?3)",
        // A small pool's rows are older than the rest: the walk of the table's newest rows
        // would find none of them.
        params![
          format!("k{i}"),
          dim,
          (i * 7_919) % 86_400_000 - if in_pool == 1 && dim.starts_with("p:") { 100_000_000 } else { 0 }
        ],
      )
      .unwrap();
    }
    tx.commit().unwrap();
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = ticks.clone();
    db.conn
      .progress_handler(
        1_000,
        Some(move || {
          counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
          false
        }),
      )
      .unwrap();
    assert_eq!(db.list_consumption_for_pool("p", 500).unwrap().len(), 500);
    db.conn
      .progress_handler(1_000, None::<fn() -> bool>)
      .unwrap();
    let instructions = ticks.load(std::sync::atomic::Ordering::Relaxed) * 1_000;
    assert!(instructions < limit, "{instructions} VM instructions");
  }
}
