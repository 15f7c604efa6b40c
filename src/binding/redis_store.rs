//! The Redis store at the edge (CONTRACT §4, Redis): the counter operations behind
//! `RedisQuotaStore(url)` and the raw commands behind the ioredis-like `getRedisClient`.
//!
//! Arguments are read and validated on the JS thread (a bad one throws at once; the JS
//! facade turns that into a rejection); the round trip to Redis runs on the addon's tokio
//! runtime and settles a promise. Metadata a counter operation needs (a pool's
//! allocations) comes from SQLite, synchronously, before the hop.

use super::args::Arg;
use super::db::with_store;
use super::dimensions::read_dimension_key;
use super::errors::or_throw;
use super::log_queue;
use super::promise::spawn_settled;
use super::store::{arg, clock, read_plan_dimensions, snapshot_js, PoolUsageSnapshotJs};
use crate::core::dimensions::QuotaPool;
use crate::error::Result;
use crate::store::redis::keys::base_pool_id;
use crate::store::redis::{counters, RedisBackend, Retry};
use napi::bindgen_prelude::{PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use std::sync::Arc;

fn env_var(name: &str) -> Option<String> {
  std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The backend of `url` (created on first use; the timeout and cluster switch are read
/// from the environment then).
pub(crate) fn backend_for(url: &str) -> Result<Arc<RedisBackend>> {
  crate::store::redis::backend(url, &env_var, &|raw| {
    log_queue::warn(
      "quota:config",
      format!(
        "QUOTA_STORE_REDIS_TIMEOUT_MS={raw:?} is not a number of ms in 1..60000; using {}",
        crate::store::redis::connection::DEFAULT_TIMEOUT_MS
      ),
      None,
    )
  })
}

fn read_backend(url: Unknown) -> Result<Arc<RedisBackend>> {
  backend_for(&arg(url, "url")?.string()?)
}

/// The pool of a dimension key's pool id (`"<pool>:model:<m>"` belongs to `<pool>`),
/// from SQLite's metadata cache.
fn pool_of(env: &Env, pool_id: &str) -> Result<Option<Arc<QuotaPool>>> {
  with_store(env, |db| db.cached_pool(base_pool_id(pool_id)))
}

/// A Redis reply as JSON-like JS: nil → `null`, integers and doubles → numbers, bulk and
/// status strings → strings, arrays, sets and pushes → arrays, maps → `[key, value]` pairs,
/// a server error inside an array → its message.
fn reply_json(value: redis::Value) -> serde_json::Value {
  use redis::Value as V;
  use serde_json::Value as J;
  match value {
    V::Nil => J::Null,
    V::Int(n) => J::from(n),
    V::Double(n) => serde_json::Number::from_f64(n).map_or(J::Null, J::Number),
    V::Boolean(b) => J::Bool(b),
    V::BulkString(bytes) => J::String(String::from_utf8_lossy(&bytes).into_owned()),
    V::SimpleString(s) => J::String(s),
    V::Okay => J::String("OK".into()),
    V::VerbatimString { text, .. } => J::String(text),
    V::BigNumber(n) => J::String(String::from_utf8_lossy(&n).into_owned()),
    V::Array(items) | V::Set(items) | V::Push { data: items, .. } => {
      J::Array(items.into_iter().map(reply_json).collect())
    }
    V::Map(pairs) => J::Array(
      pairs
        .into_iter()
        .map(|(k, v)| J::Array(vec![reply_json(k), reply_json(v)]))
        .collect(),
    ),
    V::Attribute { data, .. } => reply_json(*data),
    V::ServerError(err) => J::String(format!("{err:?}")),
    _ => J::Null,
  }
}

/// Sends one command (`args[0]` is its name) on the URL's shared connection, within the
/// timeout; resolves to the reply (see `getRedisClient`). Server errors reject with
/// `ERR_QUOTA_STORE`, connection failures and timeouts with `ERR_QUOTA_REDIS_UNAVAILABLE`.
#[napi(
  catch_unwind,
  ts_args_type = "url: string, args: Array<string | number>",
  ts_return_type = "Promise<unknown>"
)]
pub fn redis_command<'env>(
  env: &'env Env,
  url: Unknown,
  args: Unknown,
) -> napi::Result<PromiseRaw<'env, serde_json::Value>> {
  let prepared = (|| {
    let backend = read_backend(url)?;
    let list = Arg::new(args, "args")?;
    let args = list
      .elements()?
      .iter()
      .map(|a| match a.opt_number() {
        Ok(Some(n)) => Ok(format_number(n)),
        _ => a.string(),
      })
      .collect::<Result<Vec<String>>>()?;
    // Reads are retried after a dropped connection; everything else only when refused.
    let retry = match args.first().map(|c| c.to_ascii_uppercase()).as_deref() {
      Some("GET" | "MGET" | "PING" | "TTL" | "PTTL" | "EXISTS" | "SMEMBERS") => Retry::Read,
      _ => Retry::Write,
    };
    Ok((backend, args, retry))
  })();
  let (backend, args, retry) = or_throw(env, prepared)?;
  spawn_settled(
    env,
    async move { backend.command(&args, retry).await.map(reply_json) },
    |_, value| Ok(value),
  )
}

/// A number argument as JavaScript's `String(n)` would give it, for integers at least.
fn format_number(n: f64) -> String {
  if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_991.0 {
    format!("{}", n as i64)
  } else {
    format!("{n}")
  }
}

/// Drops the shared connection of `url` (every URL's without one); the next operation
/// connects again.
#[napi(catch_unwind, ts_args_type = "url?: string | null")]
pub fn redis_forget(url: Option<String>) {
  crate::store::redis::forget_backend(url.as_deref());
}

/// `consume` on Redis: one script adds `cost` to the current bucket (INCRBYFLOAT +
/// EXPIRE) and reads the previous one; resolves to the new effective value.
#[napi(
  catch_unwind,
  ts_args_type = "url: string, apiKeyId: string, dim: DimensionKey, cost: number, nowMs?: number",
  ts_return_type = "Promise<number>"
)]
pub fn redis_store_consume<'env>(
  env: &'env Env,
  url: Unknown,
  api_key_id: Unknown,
  dim: Unknown,
  cost: Unknown,
  now_ms: Option<f64>,
) -> napi::Result<PromiseRaw<'env, f64>> {
  let prepared = (|| {
    let backend = read_backend(url)?;
    let api_key_id = arg(api_key_id, "apiKeyId")?.string()?;
    let key = read_dimension_key(&arg(dim, "dim")?)?;
    let cost = arg(cost, "cost")?.number()?;
    counters::consume(backend, api_key_id, key, cost, clock(now_ms))
  })();
  spawn_settled(env, or_throw(env, prepared)?, |_, v| Ok(v))
}

/// `peek` on Redis: the effective value, no write.
#[napi(
  catch_unwind,
  ts_args_type = "url: string, apiKeyId: string, dim: DimensionKey, nowMs?: number",
  ts_return_type = "Promise<number>"
)]
pub fn redis_store_peek<'env>(
  env: &'env Env,
  url: Unknown,
  api_key_id: Unknown,
  dim: Unknown,
  now_ms: Option<f64>,
) -> napi::Result<PromiseRaw<'env, f64>> {
  let prepared = (|| {
    let backend = read_backend(url)?;
    let api_key_id = arg(api_key_id, "apiKeyId")?.string()?;
    let key = read_dimension_key(&arg(dim, "dim")?)?;
    counters::peek(backend, api_key_id, key, clock(now_ms))
  })();
  spawn_settled(env, or_throw(env, prepared)?, |_, v| Ok(v))
}

/// `poolConsumedTotal` on Redis: the summed buckets of the pool's allocations (from
/// SQLite) and of every key this engine wrote under the dimension key, in one script.
#[napi(
  catch_unwind,
  ts_args_type = "url: string, dim: DimensionKey, nowMs?: number",
  ts_return_type = "Promise<number>"
)]
pub fn redis_store_pool_consumed_total<'env>(
  env: &'env Env,
  url: Unknown,
  dim: Unknown,
  now_ms: Option<f64>,
) -> napi::Result<PromiseRaw<'env, f64>> {
  let prepared = (|| {
    let backend = read_backend(url)?;
    let key = read_dimension_key(&arg(dim, "dim")?)?;
    crate::store::validate::non_empty(&key.pool_id, "dim.poolId")?;
    let ids = pool_of(env, &key.pool_id)?
      .map(|pool| {
        pool
          .allocations
          .iter()
          .map(|a| a.api_key_id.clone())
          .collect()
      })
      .unwrap_or_default();
    counters::pool_consumed_total(backend, key, ids, clock(now_ms))
  })();
  spawn_settled(env, or_throw(env, prepared)?, |_, v| Ok(v))
}

/// `clear` on Redis: deletes the key's current and previous buckets.
#[napi(
  catch_unwind,
  ts_args_type = "url: string, apiKeyId: string, dim: DimensionKey, nowMs?: number",
  ts_return_type = "Promise<void>"
)]
pub fn redis_store_clear<'env>(
  env: &'env Env,
  url: Unknown,
  api_key_id: Unknown,
  dim: Unknown,
  now_ms: Option<f64>,
) -> napi::Result<PromiseRaw<'env, ()>> {
  let prepared = (|| {
    let backend = read_backend(url)?;
    let api_key_id = arg(api_key_id, "apiKeyId")?.string()?;
    let key = read_dimension_key(&arg(dim, "dim")?)?;
    counters::clear(backend, api_key_id, key, clock(now_ms))
  })();
  spawn_settled(env, or_throw(env, prepared)?, |_, v| Ok(v))
}

/// `poolUsage` / `poolUsageWithDimensions` on Redis: the allocations from SQLite, every
/// key's buckets of every plan dimension from one script.
#[napi(
  catch_unwind,
  ts_args_type = "url: string, poolId: string, planDims?: Array<{ unit: string; window: string; limit: number }> | null, nowMs?: number",
  ts_return_type = "Promise<PoolUsageSnapshot>"
)]
pub fn redis_store_pool_usage<'env>(
  env: &'env Env,
  url: Unknown,
  pool_id: Unknown,
  plan_dims: Option<Unknown>,
  now_ms: Option<f64>,
) -> napi::Result<PromiseRaw<'env, PoolUsageSnapshotJs>> {
  let now = clock(now_ms);
  let prepared = (|| {
    let backend = read_backend(url)?;
    let pool_id = arg(pool_id, "poolId")?.string()?;
    let dims = read_plan_dimensions(plan_dims)?;
    let allocations =
      with_store(env, |db| db.cached_pool(&pool_id))?.map(|pool| pool.allocations.clone());
    Ok(counters::pool_usage(
      backend,
      pool_id,
      allocations,
      dims,
      now,
    ))
  })();
  spawn_settled(env, or_throw(env, prepared)?, move |_, snapshot| {
    Ok(snapshot_js(snapshot, now))
  })
}

/// What a Redis URL names.
#[napi(object, object_from_js = false)]
pub struct RedisTargetInfo {
  /// The URL, password masked.
  pub url: String,
  /// Whether it is a Redis Cluster (hash-tagged key names).
  pub cluster: bool,
  /// The bound on every operation (`QUOTA_STORE_REDIS_TIMEOUT_MS`).
  pub timeout_ms: f64,
}

/// Checks a Redis URL without connecting: throws a `RangeError` naming `url` (password
/// masked) when the engine cannot use it.
#[napi(catch_unwind, ts_args_type = "url: string")]
pub fn redis_target(env: Env, url: Unknown) -> napi::Result<RedisTargetInfo> {
  let backend = or_throw(&env, read_backend(url))?;
  Ok(RedisTargetInfo {
    url: backend.display().to_string(),
    cluster: backend.layout() == crate::store::redis::KeyLayout::Cluster,
    timeout_ms: backend.timeout().as_millis() as f64,
  })
}
