//! The host's tables (docs/contract.md §5, §6): the counter-table functions, the metadata
//! API, `resolvePlan`, the retention sweep and their results. All synchronous on the calling JS thread: a
//! SQLite read costs a few microseconds, far less than a hop to a worker and back.

use super::args::arg;
use super::errors::or_throw;
use super::to_js::ToJs;
use super::with_db;
use crate::engine::input::{self, clock, now_ms};
use napi::bindgen_prelude::{Either, Null, Unknown};
use napi::Env;
use napi_derive::napi;
use quota_engine_macros::{edge, from_core};

// ---- results ------------------------------------------------------------------------
// First: napi-rs writes a result type's `js_name` into `binding.d.ts` only for the functions
// it reads after the type.

/// `{ apiKeyId, weight, capValue?, capUnit?, policy }`.
#[from_core(crate::core::dimensions::PoolAllocation, js_name = "PoolAllocation")]
pub struct PoolAllocationJs {
  pub api_key_id: String,
  /// 0..100.
  pub weight: f64,
  pub cap_value: Option<f64>,
  #[napi(ts_type = "QuotaUnit")]
  pub cap_unit: Option<String>,
  #[napi(ts_type = "Policy")]
  pub policy: String,
}

/// `{ id, connectionId, connectionIds, name, groupId, createdAt, allocations }`.
#[from_core(crate::core::dimensions::QuotaPool, js_name = "QuotaPool")]
pub struct QuotaPoolJs {
  pub id: String,
  /// The primary connection.
  pub connection_id: String,
  /// Every member connection, primary first.
  pub connection_ids: Vec<String>,
  pub name: String,
  pub group_id: String,
  /// ISO-8601.
  pub created_at: String,
  pub allocations: Vec<PoolAllocationJs>,
}

/// `{ connectionId, provider, dimensions, source }`.
#[from_core(crate::core::dimensions::ProviderPlan, js_name = "ProviderPlan")]
pub struct ProviderPlanJs {
  pub connection_id: Either<String, Null>,
  pub provider: String,
  #[napi(ts_type = "Array<QuotaDimension>")]
  pub dimensions: Vec<super::plans::QuotaDimensionJs>,
  #[napi(ts_type = "'auto' | 'manual'")]
  pub source: String,
}

/// `{ poolId, apiKeyId, model, capValue, capUnit }`.
#[from_core(crate::store::ModelCap, js_name = "ModelCap")]
pub struct ModelCapJs {
  pub pool_id: String,
  pub api_key_id: String,
  pub model: String,
  pub cap_value: f64,
  #[napi(ts_type = "QuotaUnit")]
  pub cap_unit: String,
}

/// One `quota_consumption` row.
#[from_core(crate::store::ConsumptionRow, js_name = "ConsumptionRow")]
pub struct ConsumptionRowJs {
  pub api_key_id: String,
  pub dimension_key: String,
  pub unit: String,
  pub window: String,
  pub bucket_index: f64,
  pub consumed: f64,
  pub updated_at: f64,
}

// ---- db/quotaConsumption.ts ----------------------------------------------------------

/// The bucket's value (0 when absent).
#[edge]
pub fn get_bucket(api_key_id: string, dimension_key: string, bucket_index: integer) -> f64 {
  with_db(&env, |db| {
    db.get_bucket(&api_key_id, &dimension_key, bucket_index)
  })
}

/// Adds `delta` (finite, >= 0) to one bucket (an atomic upsert, saturating at 1e15),
/// stamping `updated_at = nowMs`. A negative or non-finite delta, or a bucket index that
/// is not an integer, is a `RangeError`.
#[edge]
pub fn increment_bucket(
  api_key_id: string,
  dimension_key: string,
  bucket_index: integer,
  delta: number,
  #[ts = "number"] now_ms: input::bucket_time,
) {
  with_db(&env, |db| {
    db.increment_bucket(&api_key_id, &dimension_key, bucket_index, delta, now_ms)
  })
}

/// `{ curr, prev }` of the key's counter around `currentBucket`.
#[napi(object, object_from_js = false)]
pub struct BucketPair {
  pub curr: f64,
  pub prev: f64,
}

/// The key's current and previous buckets.
#[edge]
pub fn get_pair(api_key_id: string, dimension_key: string, current_bucket: integer) -> BucketPair {
  let (curr, prev) = with_db(&env, |db| {
    db.get_pair(&api_key_id, &dimension_key, current_bucket)
  })?;
  Ok(BucketPair { curr, prev })
}

/// `{ currTotal, prevTotal }` over every key of the dimension.
#[napi(object, object_from_js = false)]
pub struct PoolBucketTotals {
  pub curr_total: f64,
  pub prev_total: f64,
}

/// The pool's summed current and previous buckets (read from the totals table: constant
/// time however many keys the pool has).
#[edge]
pub fn sum_pool_dimension(dimension_key: string, current_bucket: integer) -> PoolBucketTotals {
  let (curr_total, prev_total) = with_db(&env, |db| {
    db.sum_pool_dimension(&dimension_key, current_bucket)
  })?;
  Ok(PoolBucketTotals {
    curr_total,
    prev_total,
  })
}

/// The pool's newest counter rows first; `limit` clamped to 1..500.
#[edge]
pub fn list_consumption_for_pool(
  pool_id: string,
  #[ts = "?number"] limit: input::row_limit,
) -> Vec<ConsumptionRowJs> {
  let rows = with_db(&env, |db| db.list_consumption_for_pool(&pool_id, limit));
  rows.map(|rows| rows.to_js())
}

/// Deletes rows whose `updated_at` is strictly older; returns how many.
#[edge]
pub fn gc_older_than(#[ts = "number"] max_updated_at_ms: input::cutoff_ms) -> f64 {
  with_db(&env, |db| db.gc_older_than(max_updated_at_ms)).map(|n| n as f64)
}

/// `gcConsumption()`: runs the retention sweep now (`QUOTA_CONSUMPTION_RETENTION_DAYS`,
/// default 14, or `retentionDays`); the number of rows deleted.
#[napi(catch_unwind)]
pub fn gc_consumption(
  env: Env,
  retention_days: Option<f64>,
  now_ms: Option<f64>,
) -> napi::Result<f64> {
  let now = clock(now_ms);
  let days = super::engine().retention_days(retention_days);
  or_throw(&env, with_db(&env, |db| db.gc_consumption(days, now))).map(|n| n as f64)
}

// ---- metadata ------------------------------------------------------------------------

/// Creates a pool (random id, its allocations and membership in one transaction).
#[edge]
pub fn create_pool(
  #[ts = "{ connectionId: string; name: string; groupId?: string; allocations?: PoolAllocation[]; connectionIds?: string[] }"]
  input: input::new_pool,
) -> QuotaPoolJs {
  with_db(&env, |db| db.create_pool(&input, now_ms())).map(|pool| pool.to_js())
}

/// The pool, or `null`.
#[edge]
pub fn get_pool(id: string) -> Option<QuotaPoolJs> {
  with_db(&env, |db| db.get_pool(&id)).map(|pool| pool.to_js())
}

/// `{ items, total }`.
#[from_core(crate::store::PoolPage)]
pub struct PoolPage {
  pub items: Vec<QuotaPoolJs>,
  pub total: f64,
}

/// A page of pools in creation order.
#[edge]
pub fn list_pools(#[ts = "?{ limit?: number; offset?: number }"] options: input::page) -> PoolPage {
  let (limit, offset) = options;
  with_db(&env, |db| db.list_pools(limit, offset)).map(|page| page.to_js())
}

/// Updates a pool's name, group, allocations (replaced) or members (replaced); the pool
/// after the update, or `null` when it does not exist.
#[edge]
pub fn update_pool(
  id: string,
  #[ts = "{ name?: string; groupId?: string; allocations?: PoolAllocation[]; connectionIds?: string[] }"]
  patch: input::pool_update,
) -> Option<QuotaPoolJs> {
  with_db(&env, |db| db.update_pool(&id, &patch, now_ms())).map(|pool| pool.to_js())
}

/// Deletes a pool with its allocations, membership and model caps.
#[edge(js_name = "deletePoolNow")]
pub fn delete_pool_now(id: string) -> bool {
  with_db(&env, |db| db.delete_pool(&id))
}

/// Replaces the pool's allocations; false when the pool does not exist.
#[edge]
pub fn upsert_allocations(
  pool_id: string,
  #[ts = "PoolAllocation[]"] allocations: input::allocations,
) -> bool {
  with_db(&env, |db| db.upsert_allocations(&pool_id, &allocations))
}

/// `{ poolId, allocation }`.
#[napi(object, object_from_js = false)]
pub struct KeyAllocation {
  pub pool_id: String,
  pub allocation: PoolAllocationJs,
}

/// Every allocation of an API key, with its pool id.
#[edge]
pub fn list_allocations_for_api_key(api_key_id: string) -> Vec<KeyAllocation> {
  let list = with_db(&env, |db| db.list_allocations_for_api_key(&api_key_id))?;
  let allocation = |(pool_id, a): &(String, _)| KeyAllocation {
    pool_id: pool_id.clone(),
    allocation: PoolAllocationJs::from(a),
  };
  Ok(list.iter().map(allocation).collect())
}

/// The stored plan of a connection, or `null`.
#[edge]
pub fn get_provider_plan(connection_id: string) -> Option<ProviderPlanJs> {
  with_db(&env, |db| db.get_provider_plan(&connection_id)).map(|plan| plan.to_js())
}

/// Stores a connection's plan (insert or replace).
#[edge]
pub fn upsert_provider_plan(
  #[ts = "{ connectionId: string; provider: string; dimensions: QuotaDimension[]; source?: 'auto' | 'manual' }"]
  plan: input::provider_plan,
) -> ProviderPlanJs {
  with_db(&env, |db| db.upsert_provider_plan(&plan, now_ms())).map(|plan| plan.to_js())
}

/// Deletes a connection's stored plan; whether one existed.
#[edge]
pub fn delete_provider_plan(connection_id: string) -> bool {
  with_db(&env, |db| db.delete_provider_plan(&connection_id))
}

/// The model cap of `(pool, key, model)`, or `null`.
#[edge]
pub fn get_model_cap(pool_id: string, api_key_id: string, model: string) -> Option<ModelCapJs> {
  with_db(&env, |db| db.get_model_cap(&pool_id, &api_key_id, &model)).map(|cap| cap.to_js())
}

/// Sets a model cap (insert or replace).
#[edge]
pub fn set_model_cap(#[ts = "ModelCap"] cap: input::model_cap) -> ModelCapJs {
  with_db(&env, |db| db.set_model_cap(&cap)).map(|cap| cap.to_js())
}

/// Deletes a model cap; whether one existed.
#[edge]
pub fn delete_model_cap(pool_id: string, api_key_id: string, model: string) -> bool {
  with_db(&env, |db| {
    db.delete_model_cap(&pool_id, &api_key_id, &model)
  })
}

/// The dashboard's one-time localStorage migration: imports the pools (ids kept) only when
/// no pool exists yet; returns how many were imported (0 on a second call).
#[edge]
pub fn import_legacy_pools(
  #[ts = "Array<{ id: string; connectionId: string; name: string; groupId?: string; createdAt?: string; allocations?: PoolAllocation[]; connectionIds?: string[] }>"]
  pools: keep,
) -> f64 {
  let pools = pools.list(input::legacy_pool)?;
  with_db(&env, |db| db.import_legacy_pools(&pools, now_ms())).map(|n| n as f64)
}

/// `resolvePlan(connectionId, provider)` (§6), which never throws: the stored plan when it
/// has dimensions, else the catalog's, else an empty manual plan.
#[napi(
  catch_unwind,
  js_name = "resolvePlan",
  ts_args_type = "connectionId: string, provider: string"
)]
pub fn resolve_plan_js(env: Env, connection_id: Unknown, provider: Unknown) -> ProviderPlanJs {
  // Each argument on its own: a connectionId that is not a string has no stored plan, and
  // the provider still finds the catalog's.
  let connection_id =
    (arg(connection_id, "connectionId").and_then(|a| a.string())).unwrap_or_default();
  let provider = (arg(provider, "provider").and_then(|a| a.string())).unwrap_or_default();
  super::host::prepare_db(&env);
  ProviderPlanJs::from(&super::engine().resolve_plan(&connection_id, &provider))
}
