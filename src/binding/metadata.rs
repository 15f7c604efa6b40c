//! The host's tables at the edge: the counter-table functions (docs/contract.md §5, the
//! host's `db/quotaConsumption.ts`), the metadata API (§5), `resolvePlan` (§6) and the
//! retention sweep. Every function runs synchronously on the calling JS thread: a SQLite
//! read costs a few microseconds, far less than a hop to a worker and back.

use super::args::Arg;
use super::burn_rate::now_ms;
use super::convert::{
  read_allocations, read_dimension, read_strings, unless_nullish, ConsumptionRowJs, ModelCapJs,
  PoolAllocationJs, ProviderPlanJs, QuotaPoolJs,
};
use super::errors::{call, or_throw};
use super::with_db;
use crate::core::dimensions::{PlanSource, ProviderPlan, QuotaUnit};
use crate::core::plans::{resolve_plan, PlanOverrides};
use crate::error::{QuotaError, Result};
use crate::store::{LegacyPool, ModelCap, NewPool, PoolUpdate};
use napi::bindgen_prelude::Unknown;
use napi::Env;
use napi_derive::napi;

pub(crate) fn arg<'a>(value: Unknown<'a>, path: &str) -> Result<Arg<'a>> {
  Arg::new(value, path)
}

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
    let api_key_id = arg(api_key_id, "apiKeyId")?.string()?;
    let dimension_key = arg(dimension_key, "dimensionKey")?.string()?;
    let bucket = arg(bucket_index, "bucketIndex")?.integer()?;
    with_db(&env, |db| {
      db.get_bucket(&api_key_id, &dimension_key, bucket)
    })
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
    let api_key_id = arg(api_key_id, "apiKeyId")?.string()?;
    let dimension_key = arg(dimension_key, "dimensionKey")?.string()?;
    let bucket = arg(bucket_index, "bucketIndex")?.integer()?;
    let delta = arg(delta, "delta")?.number()?;
    let now = arg(now_ms, "nowMs")?;
    let now = if now.is_nullish() {
      super::burn_rate::now_ms()
    } else {
      now.finite_ms()?
    };
    with_db(&env, |db| {
      db.increment_bucket(&api_key_id, &dimension_key, bucket, delta, now)
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
    let api_key_id = arg(api_key_id, "apiKeyId")?.string()?;
    let dimension_key = arg(dimension_key, "dimensionKey")?.string()?;
    let bucket = arg(current_bucket, "currentBucket")?.integer()?;
    with_db(&env, |db| db.get_pair(&api_key_id, &dimension_key, bucket))
  })
  .map(|(curr, prev)| BucketPair { curr, prev })
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
    let dimension_key = arg(dimension_key, "dimensionKey")?.string()?;
    let bucket = arg(current_bucket, "currentBucket")?.integer()?;
    with_db(&env, |db| db.sum_pool_dimension(&dimension_key, bucket))
  })
  .map(|(curr_total, prev_total)| PoolBucketTotals {
    curr_total,
    prev_total,
  })
}

/// The pool's newest counter rows first; `limit` clamped to 1..500.
#[napi(catch_unwind, ts_args_type = "poolId: string, limit?: number")]
pub fn list_consumption_for_pool(
  env: Env,
  pool_id: Unknown,
  limit: Option<Unknown>,
) -> napi::Result<Vec<ConsumptionRowJs>> {
  call(&env, || {
    let pool_id = arg(pool_id, "poolId")?.string()?;
    let limit = match limit {
      Some(value) => arg(value, "limit")?.opt_number()?.unwrap_or(100.0),
      None => 100.0,
    };
    let limit = if limit.is_finite() { limit as i64 } else { 500 };
    with_db(&env, |db| db.list_consumption_for_pool(&pool_id, limit))
  })
  .map(|rows| rows.iter().map(ConsumptionRowJs::from).collect())
}

/// Deletes rows whose `updated_at` is strictly older; returns how many.
#[napi(catch_unwind, ts_args_type = "maxUpdatedAtMs: number")]
pub fn gc_older_than(env: Env, max_updated_at_ms: Unknown) -> napi::Result<f64> {
  call(&env, || {
    let max = arg(max_updated_at_ms, "maxUpdatedAtMs")?.finite_ms()?;
    with_db(&env, |db| db.gc_older_than(max))
  })
  .map(|n| n as f64)
}

/// `gcConsumption()`: runs the retention sweep now (`QUOTA_CONSUMPTION_RETENTION_DAYS`,
/// default 14, or `retentionDays`); the number of rows deleted.
#[napi(catch_unwind)]
pub fn gc_consumption(
  env: Env,
  retention_days: Option<f64>,
  now_ms: Option<f64>,
) -> napi::Result<f64> {
  let now = super::store::clock(now_ms);
  let retention_days = retention_days
    .unwrap_or_else(|| super::engine().number(&crate::engine::config::RETENTION_DAYS));
  or_throw(
    &env,
    with_db(&env, |db| db.gc_consumption(retention_days, now)),
  )
  .map(|n| n as f64)
}

// ---- metadata ------------------------------------------------------------------------

fn optional<'a>(value: Option<Unknown<'a>>, path: &str) -> Result<Option<Arg<'a>>> {
  match value {
    Some(value) => {
      let arg = Arg::new(value, path)?;
      Ok((!arg.is_nullish()).then_some(arg))
    }
    None => Ok(None),
  }
}

/// Creates a pool (random id, its allocations and membership in one transaction).
#[napi(
  catch_unwind,
  ts_args_type = "input: { connectionId: string; name: string; groupId?: string; allocations?: PoolAllocation[]; connectionIds?: string[] }"
)]
pub fn create_pool(env: Env, input: Unknown) -> napi::Result<QuotaPoolJs> {
  call(&env, || {
    let input = arg(input, "input")?;
    let allocations = input.field("allocations")?;
    let connection_ids = input.field("connectionIds")?;
    let pool = NewPool {
      connection_id: input.field("connectionId")?.string()?,
      name: input.field("name")?.string()?,
      group_id: input.field("groupId")?.opt_string()?,
      allocations: unless_nullish(&allocations, read_allocations)?.unwrap_or_default(),
      connection_ids: unless_nullish(&connection_ids, read_strings)?.unwrap_or_default(),
    };
    with_db(&env, |db| db.create_pool(&pool, now_ms()))
  })
  .map(|p| QuotaPoolJs::from(&p))
}

/// The pool, or `null`.
#[napi(catch_unwind, ts_args_type = "id: string")]
pub fn get_pool(env: Env, id: Unknown) -> napi::Result<Option<QuotaPoolJs>> {
  call(&env, || {
    let id = arg(id, "id")?.string()?;
    with_db(&env, |db| db.get_pool(&id))
  })
  .map(|p| p.as_ref().map(QuotaPoolJs::from))
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
pub fn list_pools(env: Env, options: Option<Unknown>) -> napi::Result<PoolPage> {
  call(&env, || {
    let (limit, offset) = match optional(options, "options")? {
      Some(o) => (
        o.field("limit")?.opt_number()?,
        o.field("offset")?.opt_number()?,
      ),
      None => (None, None),
    };
    let limit = limit.map(|l| l.clamp(0.0, u32::MAX as f64) as u32);
    let offset = offset.map(|o| o.clamp(0.0, u32::MAX as f64) as u32);
    with_db(&env, |db| db.list_pools(limit, offset))
  })
  .map(|page| PoolPage {
    items: page.items.iter().map(QuotaPoolJs::from).collect(),
    total: page.total as f64,
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
    let id = arg(id, "id")?.string()?;
    let patch = arg(patch, "patch")?;
    let allocations = patch.field("allocations")?;
    let connection_ids = patch.field("connectionIds")?;
    let update = PoolUpdate {
      name: patch.field("name")?.opt_string()?,
      group_id: patch.field("groupId")?.opt_string()?,
      allocations: unless_nullish(&allocations, read_allocations)?,
      connection_ids: unless_nullish(&connection_ids, read_strings)?,
    };
    with_db(&env, |db| db.update_pool(&id, &update, now_ms()))
  })
  .map(|p| p.as_ref().map(QuotaPoolJs::from))
}

/// Deletes a pool with its allocations, membership and model caps.
#[napi(catch_unwind, js_name = "deletePoolNow", ts_args_type = "id: string")]
pub fn delete_pool_now(env: Env, id: Unknown) -> napi::Result<bool> {
  call(&env, || {
    let id = arg(id, "id")?.string()?;
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
    let pool_id = arg(pool_id, "poolId")?.string()?;
    let allocations = read_allocations(&arg(allocations, "allocations")?)?;
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
    let api_key_id = arg(api_key_id, "apiKeyId")?.string()?;
    with_db(&env, |db| db.list_allocations_for_api_key(&api_key_id))
  })
  .map(|list| {
    list
      .iter()
      .map(|(pool_id, a)| KeyAllocation {
        pool_id: pool_id.clone(),
        allocation: a.into(),
      })
      .collect()
  })
}

/// The stored plan of a connection, or `null`.
#[napi(catch_unwind, ts_args_type = "connectionId: string")]
pub fn get_provider_plan(env: Env, connection_id: Unknown) -> napi::Result<Option<ProviderPlanJs>> {
  call(&env, || {
    let connection_id = arg(connection_id, "connectionId")?.string()?;
    with_db(&env, |db| db.get_provider_plan(&connection_id))
  })
  .map(|p| p.as_ref().map(ProviderPlanJs::from))
}

/// Stores a connection's plan (insert or replace).
#[napi(
  catch_unwind,
  ts_args_type = "plan: { connectionId: string; provider: string; dimensions: QuotaDimension[]; source?: 'auto' | 'manual' }"
)]
pub fn upsert_provider_plan(env: Env, plan: Unknown) -> napi::Result<ProviderPlanJs> {
  call(&env, || {
    let plan = arg(plan, "plan")?;
    let source = plan.field("source")?;
    let plan = ProviderPlan {
      connection_id: Some(plan.field("connectionId")?.string()?),
      provider: plan.field("provider")?.string()?,
      dimensions: plan
        .field("dimensions")?
        .elements()?
        .iter()
        .map(read_dimension)
        .collect::<Result<_>>()?,
      source: match source.opt_string()? {
        Some(s) => PlanSource::parse(&s).ok_or_else(|| {
          QuotaError::range_error(
            &source.path,
            format!("unknown source {s:?} (expected auto or manual)"),
          )
        })?,
        None => PlanSource::Manual,
      },
    };
    with_db(&env, |db| db.upsert_provider_plan(&plan, now_ms()))
  })
  .map(|p| ProviderPlanJs::from(&p))
}

/// Deletes a connection's stored plan; whether one existed.
#[napi(catch_unwind, ts_args_type = "connectionId: string")]
pub fn delete_provider_plan(env: Env, connection_id: Unknown) -> napi::Result<bool> {
  call(&env, || {
    let connection_id = arg(connection_id, "connectionId")?.string()?;
    with_db(&env, |db| db.delete_provider_plan(&connection_id))
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
    let pool_id = arg(pool_id, "poolId")?.string()?;
    let api_key_id = arg(api_key_id, "apiKeyId")?.string()?;
    let model = arg(model, "model")?.string()?;
    with_db(&env, |db| db.get_model_cap(&pool_id, &api_key_id, &model))
  })
  .map(|c| c.as_ref().map(ModelCapJs::from))
}

/// Sets a model cap (insert or replace).
#[napi(catch_unwind, ts_args_type = "cap: ModelCap")]
pub fn set_model_cap(env: Env, cap: Unknown) -> napi::Result<ModelCapJs> {
  call(&env, || {
    let cap = arg(cap, "cap")?;
    let unit = cap.field("capUnit")?;
    let cap = ModelCap {
      pool_id: cap.field("poolId")?.string()?,
      api_key_id: cap.field("apiKeyId")?.string()?,
      model: cap.field("model")?.string()?,
      cap_value: cap.field("capValue")?.number()?,
      cap_unit: QuotaUnit::parse_field(&unit.string()?, &unit.path)?,
    };
    with_db(&env, |db| db.set_model_cap(&cap))
  })
  .map(|c| ModelCapJs::from(&c))
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
    let pool_id = arg(pool_id, "poolId")?.string()?;
    let api_key_id = arg(api_key_id, "apiKeyId")?.string()?;
    let model = arg(model, "model")?.string()?;
    with_db(&env, |db| {
      db.delete_model_cap(&pool_id, &api_key_id, &model)
    })
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
    let pools = arg(pools, "pools")?
      .elements()?
      .iter()
      .map(|p| {
        let allocations = p.field("allocations")?;
        let connection_ids = p.field("connectionIds")?;
        Ok(LegacyPool {
          id: p.field("id")?.string()?,
          connection_id: p.field("connectionId")?.string()?,
          name: p.field("name")?.string()?,
          group_id: p.field("groupId")?.opt_string()?,
          created_at: p.field("createdAt")?.opt_string()?,
          allocations: unless_nullish(&allocations, read_allocations)?.unwrap_or_default(),
          connection_ids: unless_nullish(&connection_ids, read_strings)?.unwrap_or_default(),
        })
      })
      .collect::<Result<Vec<_>>>()?;
    with_db(&env, |db| db.import_legacy_pools(&pools, now_ms()))
  })
  .map(|n| n as f64)
}

/// `resolvePlan(connectionId, provider)` (§6), which never throws: the stored plan when it
/// has dimensions, else the catalog's, else an empty manual plan.
#[napi(
  catch_unwind,
  js_name = "resolvePlan",
  ts_args_type = "connectionId: string, provider: string"
)]
pub fn resolve_plan_js(env: Env, connection_id: Unknown, provider: Unknown) -> ProviderPlanJs {
  let read = (|| {
    Ok::<_, QuotaError>((
      arg(connection_id, "connectionId")?.string()?,
      arg(provider, "provider")?.string()?,
    ))
  })();
  let (connection_id, provider) = read.unwrap_or_default();
  let stored = with_db(&env, |db| db.get_provider_plan(&connection_id)).unwrap_or(None);
  struct Stored(Option<ProviderPlan>);
  impl PlanOverrides for Stored {
    fn provider_plan(&self, _: &str) -> Result<Option<ProviderPlan>> {
      Ok(self.0.clone())
    }
  }
  let plan = resolve_plan(&Stored(stored), &connection_id, &provider);
  ProviderPlanJs::from(&plan)
}
