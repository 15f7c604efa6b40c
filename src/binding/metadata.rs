//! The host's tables at the edge: the counter-table functions (docs/contract.md §5, the
//! host's `db/quotaConsumption.ts`), the metadata API (§5), `resolvePlan` (§6) and the
//! retention sweep. Every function runs synchronously on the calling JS thread: a SQLite
//! read costs a few microseconds, far less than a hop to a worker and back.

use super::args::{arg, text};
use super::convert::{ConsumptionRowJs, ModelCapJs, PoolAllocationJs, ProviderPlanJs, QuotaPoolJs};
use super::errors::{call, or_throw};
use super::with_db;
use crate::engine::input::{self, clock, now_ms};
use napi::bindgen_prelude::Unknown;
use napi::Env;
use napi_derive::napi;

// ---- db/quotaConsumption.ts ----------------------------------------------------------

/// The bucket's value (0 when absent).
#[napi(
  catch_unwind,
  ts_args_type = "apiKeyId: string, dimensionKey: string, bucketIndex: number"
)]
pub fn get_bucket(
  env: Env,
  api_key_id: Unknown,
  dimension_key: Unknown,
  bucket_index: Unknown,
) -> napi::Result<f64> {
  call(&env, || {
    let key = text(api_key_id, "apiKeyId")?;
    let dim = text(dimension_key, "dimensionKey")?;
    let bucket = arg(bucket_index, "bucketIndex")?.integer()?;
    with_db(&env, |db| db.get_bucket(&key, &dim, bucket))
  })
}

/// Adds `delta` (finite, >= 0) to one bucket (an atomic upsert, saturating at 1e15),
/// stamping `updated_at = nowMs`. A negative or non-finite delta, or a bucket index that
/// is not an integer, is a `RangeError`.
#[napi(
  catch_unwind,
  ts_args_type = "apiKeyId: string, dimensionKey: string, bucketIndex: number, delta: number, nowMs: number"
)]
pub fn increment_bucket(
  env: Env,
  api_key_id: Unknown,
  dimension_key: Unknown,
  bucket_index: Unknown,
  delta: Unknown,
  now_ms: Unknown,
) -> napi::Result<()> {
  call(&env, || {
    let key = text(api_key_id, "apiKeyId")?;
    let dim = text(dimension_key, "dimensionKey")?;
    let bucket = arg(bucket_index, "bucketIndex")?.integer()?;
    let delta = arg(delta, "delta")?.number()?;
    let now = input::bucket_time(&arg(now_ms, "nowMs")?)?;
    with_db(&env, |db| {
      db.increment_bucket(&key, &dim, bucket, delta, now)
    })
  })
}

/// `{ curr, prev }` of the key's counter around `currentBucket`.
#[napi(object, object_from_js = false)]
pub struct BucketPair {
  pub curr: f64,
  pub prev: f64,
}

/// The key's current and previous buckets.
#[napi(
  catch_unwind,
  ts_args_type = "apiKeyId: string, dimensionKey: string, currentBucket: number"
)]
pub fn get_pair(
  env: Env,
  api_key_id: Unknown,
  dimension_key: Unknown,
  current_bucket: Unknown,
) -> napi::Result<BucketPair> {
  call(&env, || {
    let key = text(api_key_id, "apiKeyId")?;
    let dim = text(dimension_key, "dimensionKey")?;
    let bucket = arg(current_bucket, "currentBucket")?.integer()?;
    let (curr, prev) = with_db(&env, |db| db.get_pair(&key, &dim, bucket))?;
    Ok(BucketPair { curr, prev })
  })
}

/// `{ currTotal, prevTotal }` over every key of the dimension.
#[napi(object, object_from_js = false)]
pub struct PoolBucketTotals {
  pub curr_total: f64,
  pub prev_total: f64,
}

/// The pool's summed current and previous buckets (read from the totals table: constant
/// time however many keys the pool has).
#[napi(
  catch_unwind,
  ts_args_type = "dimensionKey: string, currentBucket: number"
)]
pub fn sum_pool_dimension(
  env: Env,
  dimension_key: Unknown,
  current_bucket: Unknown,
) -> napi::Result<PoolBucketTotals> {
  call(&env, || {
    let dim = text(dimension_key, "dimensionKey")?;
    let bucket = arg(current_bucket, "currentBucket")?.integer()?;
    let (curr_total, prev_total) = with_db(&env, |db| db.sum_pool_dimension(&dim, bucket))?;
    Ok(PoolBucketTotals {
      curr_total,
      prev_total,
    })
  })
}

/// The pool's newest counter rows first; `limit` clamped to 1..500.
#[napi(catch_unwind, ts_args_type = "poolId: string, limit?: number")]
pub fn list_consumption_for_pool(
  env: Env,
  pool_id: Unknown,
  limit: Unknown,
) -> napi::Result<Vec<ConsumptionRowJs>> {
  call(&env, || {
    let pool_id = text(pool_id, "poolId")?;
    let limit = input::row_limit(&arg(limit, "limit")?)?;
    let rows = with_db(&env, |db| db.list_consumption_for_pool(&pool_id, limit))?;
    Ok(rows.iter().map(ConsumptionRowJs::from).collect())
  })
}

/// Deletes rows whose `updated_at` is strictly older; returns how many.
#[napi(catch_unwind, ts_args_type = "maxUpdatedAtMs: number")]
pub fn gc_older_than(env: Env, max_updated_at_ms: Unknown) -> napi::Result<f64> {
  call(&env, || {
    let max = arg(max_updated_at_ms, "maxUpdatedAtMs")?.finite_ms()?;
    with_db(&env, |db| db.gc_older_than(max)).map(|n| n as f64)
  })
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
  let days = retention_days
    .unwrap_or_else(|| super::engine().number(&crate::engine::config::RETENTION_DAYS));
  or_throw(&env, with_db(&env, |db| db.gc_consumption(days, now))).map(|n| n as f64)
}

// ---- metadata ------------------------------------------------------------------------

/// Creates a pool (random id, its allocations and membership in one transaction).
#[napi(
  catch_unwind,
  ts_args_type = "input: { connectionId: string; name: string; groupId?: string; allocations?: PoolAllocation[]; connectionIds?: string[] }"
)]
pub fn create_pool(env: Env, input: Unknown) -> napi::Result<QuotaPoolJs> {
  call(&env, || {
    let pool = input::new_pool(&arg(input, "input")?)?;
    with_db(&env, |db| db.create_pool(&pool, now_ms())).map(|p| QuotaPoolJs::from(&p))
  })
}

/// The pool, or `null`.
#[napi(catch_unwind, ts_args_type = "id: string")]
pub fn get_pool(env: Env, id: Unknown) -> napi::Result<Option<QuotaPoolJs>> {
  call(&env, || {
    let id = text(id, "id")?;
    with_db(&env, |db| db.get_pool(&id)).map(|p| p.as_ref().map(QuotaPoolJs::from))
  })
}

/// `{ items, total }`.
#[napi(object, object_from_js = false)]
pub struct PoolPage {
  pub items: Vec<QuotaPoolJs>,
  pub total: f64,
}

/// A page of pools in creation order.
#[napi(
  catch_unwind,
  ts_args_type = "options?: { limit?: number; offset?: number }"
)]
pub fn list_pools(env: Env, options: Unknown) -> napi::Result<PoolPage> {
  call(&env, || {
    let (limit, offset) = input::page(&arg(options, "options")?)?;
    let page = with_db(&env, |db| db.list_pools(limit, offset))?;
    Ok(PoolPage {
      items: page.items.iter().map(QuotaPoolJs::from).collect(),
      total: page.total as f64,
    })
  })
}

/// Updates a pool's name, group, allocations (replaced) or members (replaced); the pool
/// after the update, or `null` when it does not exist.
#[napi(
  catch_unwind,
  ts_args_type = "id: string, patch: { name?: string; groupId?: string; allocations?: PoolAllocation[]; connectionIds?: string[] }"
)]
pub fn update_pool(env: Env, id: Unknown, patch: Unknown) -> napi::Result<Option<QuotaPoolJs>> {
  call(&env, || {
    let id = text(id, "id")?;
    let update = input::pool_update(&arg(patch, "patch")?)?;
    let pool = with_db(&env, |db| db.update_pool(&id, &update, now_ms()))?;
    Ok(pool.as_ref().map(QuotaPoolJs::from))
  })
}

/// Deletes a pool with its allocations, membership and model caps.
#[napi(catch_unwind, js_name = "deletePoolNow", ts_args_type = "id: string")]
pub fn delete_pool_now(env: Env, id: Unknown) -> napi::Result<bool> {
  call(&env, || {
    let id = text(id, "id")?;
    with_db(&env, |db| db.delete_pool(&id))
  })
}

/// Replaces the pool's allocations; false when the pool does not exist.
#[napi(
  catch_unwind,
  ts_args_type = "poolId: string, allocations: PoolAllocation[]"
)]
pub fn upsert_allocations(env: Env, pool_id: Unknown, allocations: Unknown) -> napi::Result<bool> {
  call(&env, || {
    let pool_id = text(pool_id, "poolId")?;
    let allocations = input::allocations(&arg(allocations, "allocations")?)?;
    with_db(&env, |db| db.upsert_allocations(&pool_id, &allocations))
  })
}

/// `{ poolId, allocation }`.
#[napi(object, object_from_js = false)]
pub struct KeyAllocation {
  pub pool_id: String,
  pub allocation: PoolAllocationJs,
}

/// Every allocation of an API key, with its pool id.
#[napi(catch_unwind, ts_args_type = "apiKeyId: string")]
pub fn list_allocations_for_api_key(
  env: Env,
  api_key_id: Unknown,
) -> napi::Result<Vec<KeyAllocation>> {
  call(&env, || {
    let api_key_id = text(api_key_id, "apiKeyId")?;
    let list = with_db(&env, |db| db.list_allocations_for_api_key(&api_key_id))?;
    let allocation = |(pool_id, a): &(String, _)| KeyAllocation {
      pool_id: pool_id.clone(),
      allocation: PoolAllocationJs::from(a),
    };
    Ok(list.iter().map(allocation).collect())
  })
}

/// The stored plan of a connection, or `null`.
#[napi(catch_unwind, ts_args_type = "connectionId: string")]
pub fn get_provider_plan(env: Env, connection_id: Unknown) -> napi::Result<Option<ProviderPlanJs>> {
  call(&env, || {
    let id = text(connection_id, "connectionId")?;
    let plan = with_db(&env, |db| db.get_provider_plan(&id))?;
    Ok(plan.as_ref().map(ProviderPlanJs::from))
  })
}

/// Stores a connection's plan (insert or replace).
#[napi(
  catch_unwind,
  ts_args_type = "plan: { connectionId: string; provider: string; dimensions: QuotaDimension[]; source?: 'auto' | 'manual' }"
)]
pub fn upsert_provider_plan(env: Env, plan: Unknown) -> napi::Result<ProviderPlanJs> {
  call(&env, || {
    let plan = input::provider_plan(&arg(plan, "plan")?)?;
    let stored = with_db(&env, |db| db.upsert_provider_plan(&plan, now_ms()))?;
    Ok(ProviderPlanJs::from(&stored))
  })
}

/// Deletes a connection's stored plan; whether one existed.
#[napi(catch_unwind, ts_args_type = "connectionId: string")]
pub fn delete_provider_plan(env: Env, connection_id: Unknown) -> napi::Result<bool> {
  call(&env, || {
    let id = text(connection_id, "connectionId")?;
    with_db(&env, |db| db.delete_provider_plan(&id))
  })
}

/// The model cap of `(pool, key, model)`, or `null`.
#[napi(
  catch_unwind,
  ts_args_type = "poolId: string, apiKeyId: string, model: string"
)]
pub fn get_model_cap(
  env: Env,
  pool_id: Unknown,
  api_key_id: Unknown,
  model: Unknown,
) -> napi::Result<Option<ModelCapJs>> {
  call(&env, || {
    let pool = text(pool_id, "poolId")?;
    let key = text(api_key_id, "apiKeyId")?;
    let model = text(model, "model")?;
    let cap = with_db(&env, |db| db.get_model_cap(&pool, &key, &model))?;
    Ok(cap.as_ref().map(ModelCapJs::from))
  })
}

/// Sets a model cap (insert or replace).
#[napi(catch_unwind, ts_args_type = "cap: ModelCap")]
pub fn set_model_cap(env: Env, cap: Unknown) -> napi::Result<ModelCapJs> {
  call(&env, || {
    let cap = input::model_cap(&arg(cap, "cap")?)?;
    with_db(&env, |db| db.set_model_cap(&cap)).map(|c| ModelCapJs::from(&c))
  })
}

/// Deletes a model cap; whether one existed.
#[napi(
  catch_unwind,
  ts_args_type = "poolId: string, apiKeyId: string, model: string"
)]
pub fn delete_model_cap(
  env: Env,
  pool_id: Unknown,
  api_key_id: Unknown,
  model: Unknown,
) -> napi::Result<bool> {
  call(&env, || {
    let pool = text(pool_id, "poolId")?;
    let key = text(api_key_id, "apiKeyId")?;
    let model = text(model, "model")?;
    with_db(&env, |db| db.delete_model_cap(&pool, &key, &model))
  })
}

/// The dashboard's one-time localStorage migration: imports the pools (ids kept) only when
/// no pool exists yet; returns how many were imported (0 on a second call).
#[napi(
  catch_unwind,
  ts_args_type = "pools: Array<{ id: string; connectionId: string; name: string; groupId?: string; createdAt?: string; allocations?: PoolAllocation[]; connectionIds?: string[] }>"
)]
pub fn import_legacy_pools(env: Env, pools: Unknown) -> napi::Result<f64> {
  call(&env, || {
    let pools = arg(pools, "pools")?.list(input::legacy_pool)?;
    with_db(&env, |db| db.import_legacy_pools(&pools, now_ms())).map(|n| n as f64)
  })
}

/// `resolvePlan(connectionId, provider)` (§6), which never throws: the stored plan when it
/// has dimensions, else the catalog's, else an empty manual plan.
#[napi(
  catch_unwind,
  js_name = "resolvePlan",
  ts_args_type = "connectionId: string, provider: string"
)]
pub fn resolve_plan_js(env: Env, connection_id: Unknown, provider: Unknown) -> ProviderPlanJs {
  let connection_id = text(connection_id, "connectionId");
  let provider = text(provider, "provider");
  let (connection_id, provider) = match (connection_id, provider) {
    (Ok(id), Ok(provider)) => (id, provider),
    _ => Default::default(),
  };
  super::host::prepare_db(&env);
  ProviderPlanJs::from(&super::engine().resolve_plan(&connection_id, &provider))
}
