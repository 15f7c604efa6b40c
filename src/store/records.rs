//! The plain values the metadata and counter-table functions take and return (docs/contract.md §5).

use crate::core::dimensions::{PoolAllocation, QuotaPool, QuotaUnit};

/// `createPool({ connectionId, name, groupId?, allocations?, connectionIds? })`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewPool {
  /// The primary connection.
  pub connection_id: String,
  pub name: String,
  /// `None` (or empty) reads back as `"group-demo"`.
  pub group_id: Option<String>,
  pub allocations: Vec<PoolAllocation>,
  /// Further member connections; the primary is always the first member.
  pub connection_ids: Vec<String>,
}

/// `updatePool(id, { name?, groupId?, allocations?, connectionIds? })`: `None` keeps the
/// stored value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolUpdate {
  pub name: Option<String>,
  pub group_id: Option<String>,
  /// Replaces every allocation of the pool.
  pub allocations: Option<Vec<PoolAllocation>>,
  /// Replaces the membership. Empty: no membership rows (the pool reads as
  /// `[connectionId]`). Otherwise the list, deduplicated; when it contains the current
  /// primary, the primary moves to the front, else its first entry becomes the primary.
  pub connection_ids: Option<Vec<String>>,
}

/// One pool of `importLegacyPools(pools)`: the dashboard's localStorage form, ids kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LegacyPool {
  pub id: String,
  pub connection_id: String,
  pub name: String,
  pub group_id: Option<String>,
  /// ISO-8601; `None` or empty: the import time.
  pub created_at: Option<String>,
  pub allocations: Vec<PoolAllocation>,
  pub connection_ids: Vec<String>,
}

/// `listPools(...)` → `{ items, total }`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolPage {
  pub items: Vec<QuotaPool>,
  /// Every pool, whatever `limit` and `offset` were.
  pub total: u64,
}

/// `{ poolId, apiKeyId, model, capValue, capUnit }`: a per-model cap of one key in one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCap {
  pub pool_id: String,
  pub api_key_id: String,
  pub model: String,
  pub cap_value: f64,
  pub cap_unit: QuotaUnit,
}

/// One `quota_consumption` row as `listConsumptionForPool` returns it. `unit` and `window`
/// are the last two `:`-separated parts of `dimension_key` (pool ids may contain `:`),
/// as stored, even when they are not known names.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumptionRow {
  pub api_key_id: String,
  pub dimension_key: String,
  pub unit: String,
  pub window: String,
  pub bucket_index: i64,
  pub consumed: f64,
  pub updated_at: i64,
}

/// The unit and window of `"<poolId>:<unit>:<window>"`: its last two `:`-separated parts
/// (`""` for a missing one).
pub fn unit_and_window(key: &str) -> (&str, &str) {
  let mut parts = key.rsplitn(3, ':');
  let window = parts.next().unwrap_or("");
  (parts.next().unwrap_or(""), window)
}
