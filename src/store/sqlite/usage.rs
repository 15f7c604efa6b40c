//! `poolUsageWithDimensions(poolId, planDims)` (docs/contract.md §4): the pool's allocations and
//! every key's effective consumption per plan dimension, read in one transaction.

use super::counters::per_key;
use super::metadata::load_pool;
use super::SqliteDb;
use crate::core::dimensions::{QuotaUnit, QuotaWindow};
use crate::error::Result;
use crate::store::usage::{dimension_usage, PlanDimension, PoolUsageSnapshot};
use std::collections::HashMap;

impl SqliteDb {
  /// The snapshot without `generatedAt` and `burnRate` (the caller adds them). Plan
  /// dimensions with an unknown unit or window are skipped; an unknown pool has no
  /// dimensions. One row per allocation of the pool, in allocation order.
  pub fn pool_usage_with_dimensions<S: AsRef<str>>(
    &self,
    pool_id: &str,
    plan_dims: &[PlanDimension<S>],
    now_ms: i64,
  ) -> Result<PoolUsageSnapshot> {
    self.in_read(|conn| {
      let mut snapshot = PoolUsageSnapshot {
        pool_id: pool_id.to_string(),
        dimensions: Vec::new(),
      };
      let Some(pool) = load_pool(conn, pool_id)? else {
        return Ok(snapshot);
      };
      for dim in plan_dims {
        let (Some(unit), Some(window)) = (
          QuotaUnit::parse(dim.unit.as_ref()),
          QuotaWindow::parse(dim.window.as_ref()),
        ) else {
          continue;
        };
        let key = format!("{pool_id}:{unit}:{window}");
        let consumed: HashMap<String, f64> = per_key(conn, &key, window.ms(), now_ms)?
          .into_iter()
          .collect();
        snapshot.dimensions.push(dimension_usage(
          unit,
          window,
          dim.limit,
          &pool.allocations,
          |k| consumed.get(k).copied().unwrap_or(0.0),
        ));
      }
      Ok(snapshot)
    })
  }
}
