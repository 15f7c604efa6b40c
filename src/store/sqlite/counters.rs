//! The sliding-window counters in `quota_consumption` (docs/contract.md §2, §4) and the host's
//! `db/quotaConsumption.ts` functions on the same table.
//!
//! An increment is one upsert statement that also returns the new `curr` and the `prev`
//! bucket: atomic across threads and processes (SQLite's write lock), committed before it
//! returns, and the value it returns is consistent with the write. Pool totals come from
//! `quota_consumption_totals` (kept by triggers, see the migration), two rows whatever the
//! pool size.

use super::values::{f64_of, i64_of, string_of};
use super::{SqliteDb, StoreContext};
use crate::core::dimensions::DimensionKey;
use crate::core::sliding_window::{bucket_index, effective};
use crate::error::{QuotaError, Result};
use crate::store::records::{split_dimension_key, ConsumptionRow};
use crate::store::validate::COUNTER_MAX;
use crate::store::{validate, CounterStore};
use rusqlite::{params, Connection};

const UPSERT_RETURNING: &str = "
  INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at)
  VALUES (?1, ?2, ?3, min(?4, 1e15), ?5)
  ON CONFLICT (api_key_id, dimension_key, bucket_index) DO UPDATE SET
    consumed = min(coalesce(consumed, 0) + excluded.consumed, 1e15),
    updated_at = excluded.updated_at
  RETURNING consumed,
    (SELECT consumed FROM quota_consumption
     WHERE api_key_id = ?1 AND dimension_key = ?2 AND bucket_index = ?3 - 1)";

const UPSERT: &str = "
  INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at)
  VALUES (?1, ?2, ?3, min(?4, 1e15), ?5)
  ON CONFLICT (api_key_id, dimension_key, bucket_index) DO UPDATE SET
    consumed = min(coalesce(consumed, 0) + excluded.consumed, 1e15),
    updated_at = excluded.updated_at";

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
    SUM(CASE WHEN bucket_index = ?2 THEN coalesce(consumed, 0) ELSE 0 END),
    SUM(CASE WHEN bucket_index = ?2 - 1 THEN coalesce(consumed, 0) ELSE 0 END)
  FROM quota_consumption
  WHERE dimension_key = ?1 AND bucket_index IN (?2, ?2 - 1)
  GROUP BY api_key_id
  ORDER BY api_key_id";

/// `(curr, prev)` of one key and dimension key string, as committed.
pub(super) fn pair(
  conn: &Connection,
  api_key_id: &str,
  dimension_key: &str,
  current: i64,
) -> Result<(f64, f64)> {
  conn
    .prepare_cached(SELECT_PAIR)
    .ctx("reading a counter")?
    .query_row(params![api_key_id, dimension_key, current], |row| {
      Ok((
        f64_of(row.get_ref(0)?).unwrap_or(0.0),
        f64_of(row.get_ref(1)?).unwrap_or(0.0),
      ))
    })
    .ctx("reading a counter")
}

/// `(curr_total, prev_total)` of a dimension key string, from the totals table, as
/// committed.
pub(super) fn totals_pair(
  conn: &Connection,
  dimension_key: &str,
  current: i64,
) -> Result<(f64, f64)> {
  conn
    .prepare_cached(SELECT_TOTALS_PAIR)
    .ctx("reading pool totals")?
    .query_row(params![dimension_key, current], |row| {
      Ok((
        f64_of(row.get_ref(0)?).unwrap_or(0.0),
        f64_of(row.get_ref(1)?).unwrap_or(0.0),
      ))
    })
    .ctx("reading pool totals")
}

/// Every key's effective value for a dimension key string at `now_ms`.
pub(super) fn per_key(
  conn: &Connection,
  dimension_key: &str,
  window_ms: i64,
  now_ms: i64,
) -> Result<Vec<(String, f64)>> {
  let current = bucket_index(now_ms, window_ms);
  let mut stmt = conn
    .prepare_cached(SELECT_PER_KEY)
    .ctx("reading counters")?;
  let rows = stmt
    .query_map(params![dimension_key, current], |row| {
      let curr = f64_of(row.get_ref(1)?).unwrap_or(0.0);
      let prev = f64_of(row.get_ref(2)?).unwrap_or(0.0);
      Ok((
        string_of(row.get_ref(0)?).unwrap_or_default(),
        effective(prev, curr, now_ms, window_ms),
      ))
    })
    .ctx("reading counters")?;
  rows
    .collect::<rusqlite::Result<_>>()
    .ctx("reading counters")
}

fn check_key(api_key_id: &str, key: &DimensionKey) -> Result<()> {
  validate::non_empty(api_key_id, "apiKeyId")?;
  validate::non_empty(&key.pool_id, "dim.poolId")
}

impl SqliteDb {
  /// `SqliteQuotaStore.consume` through the record buffer (docs/sqlite.md, "Records are
  /// buffered"): validates, adds `cost` to the buffer and answers the new effective value,
  /// which the buffered read already knows — no transaction of its own; the buffer is
  /// committed with the records, by time. With `max_age` zero (`QUOTA_RECORD_FLUSH_MS=0`)
  /// it commits in its own call, as before, after what is buffered.
  pub fn consume_buffered(
    &self,
    api_key_id: &str,
    key: &DimensionKey,
    cost: f64,
    now_ms: i64,
    max_age: std::time::Duration,
  ) -> Result<f64> {
    check_key(api_key_id, key)?;
    validate::cost(cost, "cost")?;
    if max_age.is_zero() {
      self.flush_before_use();
      return self.consume(api_key_id, key, cost, now_ms);
    }
    self.buffer_one(api_key_id, key, cost, now_ms, max_age);
    self.hot_scope(|db| db.peek(api_key_id, key, now_ms))
  }
}

impl CounterStore for SqliteDb {
  fn consume(&self, api_key_id: &str, key: &DimensionKey, cost: f64, now_ms: i64) -> Result<f64> {
    check_key(api_key_id, key)?;
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
        f64_of(row.get_ref(0).ctx("consuming")?).unwrap_or(0.0),
        f64_of(row.get_ref(1).ctx("consuming")?).unwrap_or(0.0),
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
    let (pending_curr, pending_prev) = self.pending_key_pair(api_key_id, &dimension_key, current);
    // The flush saturates the sum at COUNTER_MAX: so does the read.
    Ok(effective(
      (prev + pending_prev).min(COUNTER_MAX),
      (curr + pending_curr).min(COUNTER_MAX),
      now_ms,
      window_ms,
    ))
  }

  fn peek(&self, api_key_id: &str, key: &DimensionKey, now_ms: i64) -> Result<f64> {
    check_key(api_key_id, key)?;
    let window_ms = key.window.ms();
    let pair = self.key_pair_now(api_key_id, key, bucket_index(now_ms, window_ms))?;
    Ok(pair.effective(now_ms, window_ms))
  }

  fn pool_consumed_total(&self, key: &DimensionKey, now_ms: i64) -> Result<f64> {
    validate::non_empty(&key.pool_id, "dim.poolId")?;
    let window_ms = key.window.ms();
    let totals = self.totals_pair_now(key, bucket_index(now_ms, window_ms))?;
    Ok(totals.effective(now_ms, window_ms))
  }

  fn clear(&self, api_key_id: &str, key: &DimensionKey) -> Result<()> {
    check_key(api_key_id, key)?;
    let dimension_key = key.to_string();
    self
      .conn
      .prepare_cached("DELETE FROM quota_consumption WHERE api_key_id = ?1 AND dimension_key = ?2")
      .ctx("clearing a counter")?
      .execute(params![api_key_id, dimension_key])
      .ctx("clearing a counter")?;
    // Buffered records of the counter go too (they are still buffered when a flush failed
    // just before), or they would bring it back.
    self.discard_pending_counter(api_key_id, &dimension_key);
    Ok(())
  }

  fn per_key_effective(&self, key: &DimensionKey, now_ms: i64) -> Result<Vec<(String, f64)>> {
    validate::non_empty(&key.pool_id, "dim.poolId")?;
    per_key(&self.conn, &key.to_string(), key.window.ms(), now_ms)
  }
}

impl SqliteDb {
  /// `getBucket(apiKeyId, dimensionKey, bucketIndex)`: the bucket's value, 0 when absent.
  pub fn get_bucket(&self, api_key_id: &str, dimension_key: &str, bucket: i64) -> Result<f64> {
    let value = self
      .conn
      .prepare_cached(
        "SELECT consumed FROM quota_consumption
         WHERE api_key_id = ?1 AND dimension_key = ?2 AND bucket_index = ?3",
      )
      .ctx("reading a bucket")?
      .query_row(params![api_key_id, dimension_key, bucket], |row| {
        Ok(f64_of(row.get_ref(0)?))
      });
    let (pending, _) = self.pending_key_pair(api_key_id, dimension_key, bucket);
    match value {
      Ok(v) => Ok((v.unwrap_or(0.0) + pending).min(COUNTER_MAX)),
      Err(rusqlite::Error::QueryReturnedNoRows) => Ok(pending),
      Err(e) => Err(e).ctx("reading a bucket"),
    }
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
    self
      .conn
      .prepare_cached(UPSERT)
      .ctx("incrementing a bucket")?
      .execute(params![api_key_id, dimension_key, bucket, delta, now_ms])
      .ctx("incrementing a bucket")?;
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
    let (curr, prev) = pair(&self.conn, api_key_id, dimension_key, current)?;
    let (pending_curr, pending_prev) = self.pending_key_pair(api_key_id, dimension_key, current);
    Ok((
      (curr + pending_curr).min(COUNTER_MAX),
      (prev + pending_prev).min(COUNTER_MAX),
    ))
  }

  /// `sumPoolDimension(dimensionKey, currentBucket)` → `(currTotal, prevTotal)` over every
  /// API key, read together from the totals table.
  pub fn sum_pool_dimension(&self, dimension_key: &str, current: i64) -> Result<(f64, f64)> {
    // A dropped totals trigger (a recreated table) shows as a schema change: re-applied
    // here, with the totals rebuilt, before they are read.
    self.refresh_cache()?;
    let (curr, prev) = totals_pair(&self.conn, dimension_key, current)?;
    let (pending_curr, pending_prev) = self.pending_totals_pair(dimension_key, current);
    Ok((curr + pending_curr, prev + pending_prev))
  }

  /// `listConsumptionForPool(poolId, limit)`: the pool's rows (dimension keys starting
  /// with `"<poolId>:"`, model-cap buckets `"<poolId>:model:…"` included), newest
  /// `updated_at` first, `limit` clamped to 1..=500. The prefix is matched as a byte range
  /// (`>= "<poolId>:"` and `< "<poolId>;"`), so `%` or `_` in a pool id match themselves
  /// and the match is case-sensitive.
  pub fn list_consumption_for_pool(
    &self,
    pool_id: &str,
    limit: i64,
  ) -> Result<Vec<ConsumptionRow>> {
    let limit = limit.clamp(1, 500);
    let low = format!("{pool_id}:");
    let high = format!("{pool_id};");
    let mut stmt = self
      .conn
      .prepare_cached(
        "SELECT api_key_id, dimension_key, bucket_index, consumed, updated_at
         FROM quota_consumption
         WHERE dimension_key >= ?1 AND dimension_key < ?2
         ORDER BY updated_at DESC, bucket_index DESC, dimension_key, api_key_id
         LIMIT ?3",
      )
      .ctx("listing consumption")?;
    let rows = stmt
      .query_map(params![low, high, limit], |row| {
        let dimension_key = string_of(row.get_ref(1)?).unwrap_or_default();
        let (_, unit, window) = split_dimension_key(&dimension_key);
        Ok(ConsumptionRow {
          api_key_id: string_of(row.get_ref(0)?).unwrap_or_default(),
          unit: unit.to_string(),
          window: window.to_string(),
          bucket_index: i64_of(row.get_ref(2)?).unwrap_or(0),
          consumed: f64_of(row.get_ref(3)?).unwrap_or(0.0),
          updated_at: i64_of(row.get_ref(4)?).unwrap_or(0),
          dimension_key,
        })
      })
      .ctx("listing consumption")?;
    rows
      .collect::<rusqlite::Result<_>>()
      .ctx("listing consumption")
  }
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
    validate_writes(api_key_id, writes)?;
    let tx =
      rusqlite::Transaction::new_unchecked(&self.conn, rusqlite::TransactionBehavior::Immediate)
        .ctx("starting a write")?;
    {
      let mut stmt = tx.prepare_cached(UPSERT).ctx("consuming")?;
      for (key, cost) in writes {
        let current = bucket_index(now_ms, key.window.ms());
        stmt
          .execute(params![api_key_id, key.to_string(), current, cost, now_ms])
          .ctx("consuming")?;
      }
    }
    tx.commit().ctx("committing")
  }
}

/// The checks of a key's batch of writes: a bad one means nothing is written.
pub(super) fn validate_writes(api_key_id: &str, writes: &[(DimensionKey, f64)]) -> Result<()> {
  validate::non_empty(api_key_id, "apiKeyId")?;
  for (index, (key, cost)) in writes.iter().enumerate() {
    validate::non_empty(&key.pool_id, &format!("writes[{index}].poolId"))?;
    validate::cost(*cost, &format!("writes[{index}].cost"))?;
  }
  Ok(())
}
