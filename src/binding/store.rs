//! The counter stores (docs/contract.md §4): one set of functions behind `SqliteQuotaStore`
//! and `RedisQuotaStore(url)`, each taking its driver's number; the driver choice of
//! `getQuotaStore()`; the ioredis-like client's raw commands. Each answers with the value
//! (SQLite) or a promise of it (Redis); the JS facade makes both a promise.

use super::args::Arg;
use super::errors::or_throw;
use super::to_js::ToJs;
use super::{crossing, spawn_settled};
use super::{engine, host};
use crate::core::dimensions::DimensionKey;
use crate::engine::driver::{ChosenDriver, CounterAt, Driver};
use crate::engine::input::{self, clock};
use crate::engine::Step;
use crate::error::Result;
use crate::store::iso_time::iso_from_ms;
use crate::store::redis::{client_command, RedisBackend};
use crate::store::PoolUsageSnapshot;
use napi::bindgen_prelude::{Either, PromiseRaw, ToNapiValue};
use napi::Env;
use napi_derive::napi;
use quota_engine_macros::{edge, from_core};

/// A value now, or a promise of it.
pub(crate) type Answer<'env, T> = Either<T, PromiseRaw<'env, T>>;

/// A store step as JS sees it: `map` of the value (or the thrown error) now, or a promise.
fn answer<'env, T, V>(
  env: &'env Env,
  step: Step<Result<T>>,
  map: impl FnOnce(T) -> V + Send + 'static,
) -> napi::Result<Answer<'env, V>>
where
  T: Send + 'static,
  V: ToNapiValue + Send + 'static,
{
  match step {
    Step::Now(result) => or_throw(env, result).map(|v| Either::A(map(v))),
    Step::Later(future) => spawn_settled(env, future, move |_, v| Ok(map(v))).map(Either::B),
  }
}

/// The number of a driver, which every store function takes first: `0` SQLite (no `url`),
/// or Redis at `url` (a `RangeError` naming `url` when the engine cannot use it).
#[edge]
pub fn store_driver(
  #[typed]
  #[ts = "?string | null"]
  url: Option<String>,
) -> u32 {
  engine().driver_number(url.as_deref())
}

// The store functions take `dim` and its three fields, read off it by the glue: three N-API
// property reads cost more than the rest of a SQLite `consume`. Of `dim` only its type is read.

/// `consume`: adds `cost` to the current bucket; the new effective value.
#[edge(ts_return_type = "number | Promise<number>")]
pub fn store_consume(
  #[ts = "number"] driver: numbered,
  api_key_id: string,
  #[ts = "DimensionKey"] dim: Arg::object,
  #[path = "dim.poolId"] pool_id: string,
  #[path = "dim.unit"] unit: unit,
  #[path = "dim.window"] window: window,
  cost: number,
  #[typed] now_ms: Option<f64>,
) -> napi::Result<Answer<'env, f64>> {
  let dim = DimensionKey::new(pool_id, unit, window);
  if driver.url().is_none() {
    super::hot_path::flush_at_teardown(env);
  }
  host::prepare_db(env);
  let step = driver.consume(engine(), at(api_key_id, dim, now_ms), cost);
  answer(env, step, |v| v)
}

/// `peek`: the effective value, no write.
#[edge(ts_return_type = "number | Promise<number>")]
pub fn store_peek(
  #[ts = "number"] driver: numbered,
  api_key_id: string,
  #[ts = "DimensionKey"] dim: Arg::object,
  #[path = "dim.poolId"] pool_id: string,
  #[path = "dim.unit"] unit: unit,
  #[path = "dim.window"] window: window,
  #[typed] now_ms: Option<f64>,
) -> napi::Result<Answer<'env, f64>> {
  let dim = DimensionKey::new(pool_id, unit, window);
  host::prepare_db(env);
  let step = driver.peek(engine(), at(api_key_id, dim, now_ms));
  answer(env, step, |v| v)
}

/// `poolConsumedTotal`: the sliding formula over the pool's summed buckets.
#[edge(ts_return_type = "number | Promise<number>")]
pub fn store_pool_consumed_total(
  #[ts = "number"] driver: numbered,
  #[ts = "DimensionKey"] dim: Arg::object,
  #[path = "dim.poolId"] pool_id: string,
  #[path = "dim.unit"] unit: unit,
  #[path = "dim.window"] window: window,
  #[typed] now_ms: Option<f64>,
) -> napi::Result<Answer<'env, f64>> {
  let dim = DimensionKey::new(pool_id, unit, window);
  host::prepare_db(env);
  let step = driver.pool_consumed_total(engine(), dim, clock(now_ms));
  answer(env, step, |v| v)
}

/// `clear`: zeroes the key's counter (curr and prev).
#[edge(ts_return_type = "void | Promise<void>")]
pub fn store_clear(
  #[ts = "number"] driver: numbered,
  api_key_id: string,
  #[ts = "DimensionKey"] dim: Arg::object,
  #[path = "dim.poolId"] pool_id: string,
  #[path = "dim.unit"] unit: unit,
  #[path = "dim.window"] window: window,
  #[typed] now_ms: Option<f64>,
) -> napi::Result<Answer<'env, ()>> {
  let dim = DimensionKey::new(pool_id, unit, window);
  host::prepare_db(env);
  let step = driver.clear(engine(), at(api_key_id, dim, now_ms));
  answer(env, step, |v| v)
}

/// `poolUsage` / `poolUsageWithDimensions`: per-key use, fair share, deficit and
/// borrowing for each plan dimension (unknown windows skipped; an unknown pool has none).
#[edge(ts_return_type = "PoolUsageSnapshot | Promise<PoolUsageSnapshot>")]
pub fn store_pool_usage(
  #[ts = "number"] driver: numbered,
  pool_id: string,
  #[ts = "?Array<{ unit: string; window: string; limit: number }> | null"]
  plan_dims: input::plan_dimensions,
  #[typed] now_ms: Option<f64>,
) -> napi::Result<Answer<'env, PoolUsageSnapshotJs>> {
  let now = clock(now_ms);
  host::prepare_db(env);
  let step = driver.pool_usage(engine(), pool_id, plan_dims, now);
  answer(env, step, move |s| snapshot_js(s, now))
}

/// The driver of a number `storeDriver` gave.
fn at(api_key_id: String, key: DimensionKey, now_ms: Option<f64>) -> CounterAt {
  let now_ms = clock(now_ms);
  CounterAt {
    api_key_id,
    key,
    now_ms,
  }
}

fn numbered(number: &Arg) -> Result<Driver> {
  engine().numbered_driver(number.integer()?)
}

/// The driver `getQuotaStore()` chose (`choice`: its sequence number, for `announceStore`).
#[from_core(crate::engine::driver::ChosenDriver)]
pub struct ChosenStore {
  #[napi(ts_type = "'sqlite' | 'redis'")]
  pub driver: String,
  pub url: Option<String>,
  pub choice: f64,
}

/// `getQuotaStore()`'s choice (docs/contract.md §4). Never fails.
#[napi(catch_unwind, ts_return_type = "ChosenStore | Promise<ChosenStore>")]
pub fn choose_store(env: &Env) -> napi::Result<Answer<'_, ChosenStore>> {
  host::prepare_db(env);
  let step = engine().choose_numbered();
  crossing(env, step, |(driver, choice)| {
    (&ChosenDriver::new(driver, choice)).into()
  })
}

/// The driver `getQuotaStore()` chose, or `null` before it resolved (since the last reset).
#[napi(catch_unwind)]
pub fn chosen_store_now() -> Option<ChosenStore> {
  engine().chosen_now().as_ref().map(ChosenStore::from)
}

/// `getQuotaStore()` resolved with `choice`: `getQuotaStoreSync()` answers from now on.
#[napi(catch_unwind)]
pub fn announce_store(choice: f64) {
  engine().announce_driver(choice as u64);
}

/// `resetQuotaStoreSingleton()`: the next use chooses again.
#[napi(catch_unwind)]
pub fn reset_store_choice() {
  engine().forget_driver();
}

/// Closes the engine's connection, committing the buffered records first (what cannot be
/// committed is dropped with a warning); the next call reopens, resolving the path again.
#[napi(catch_unwind, js_name = "closeQuotaDb")]
pub fn close_quota_db(env: Env) -> napi::Result<()> {
  or_throw(&env, engine().close_db())
}

/// The process is exiting (its main thread's `exit` event): a failed commit is no longer
/// retried, so it is not logged as a fault (the exit handler says what is left), and a
/// record after the exit's close is committed and closed at its thread's teardown.
#[napi(catch_unwind, js_name = "__exiting", skip_typescript)]
pub fn exiting() {
  let exiting = &engine().database.exiting;
  exiting.store(true, std::sync::atomic::Ordering::Release);
}

/// Sends one command (`args[0]` its name) within the timeout; resolves to the reply. Server
/// errors reject with `ERR_QUOTA_STORE`, the rest with `ERR_QUOTA_REDIS_UNAVAILABLE`.
#[edge(ts_return_type = "Promise<unknown>")]
pub fn redis_command(
  #[ts = "string"] url: redis_backend,
  #[ts = "Array<string | number>"] args: input::command_words,
) -> napi::Result<PromiseRaw<'env, serde_json::Value>> {
  let reply = async move { client_command(&url, &args).await };
  spawn_settled(env, reply, |_, value| Ok(value))
}

/// The backend of a Redis URL the engine can use.
fn redis_backend(url: &Arg) -> Result<std::sync::Arc<RedisBackend>> {
  engine().redis_backend(&url.string()?)
}

/// Drops the connections of `url` (of every URL without one); the next operation reconnects.
#[napi(catch_unwind, ts_args_type = "url?: string | null")]
pub fn redis_forget(url: Option<String>) {
  engine().forget_redis(url.as_deref());
}

/// What a Redis URL names (the URL with its password masked).
#[from_core(crate::engine::driver::RedisTarget)]
pub struct RedisTargetInfo {
  pub url: String,
  pub cluster: bool,
  /// The bound on every operation (`QUOTA_STORE_REDIS_TIMEOUT_MS`).
  pub timeout_ms: f64,
}

/// Checks a Redis URL without connecting (a `RangeError` naming `url` when unusable).
#[edge]
pub fn redis_target(url: string) -> RedisTargetInfo {
  engine()
    .redis_target(&url)
    .map(|t| RedisTargetInfo::from(&t))
}

/// One key of a snapshot dimension.
#[from_core(crate::store::KeyUsage, js_name = "PoolKeyUsage")]
pub struct KeyUsageJs {
  pub api_key_id: String,
  pub consumed: f64,
  pub fair_share: f64,
  pub deficit: f64,
  pub borrowing: bool,
}

/// One dimension of a snapshot.
#[from_core(crate::store::DimensionUsage, js_name = "PoolDimensionUsage")]
pub struct DimensionUsageJs {
  #[napi(ts_type = "QuotaUnit")]
  pub unit: String,
  #[napi(ts_type = "QuotaWindow")]
  pub window: String,
  pub limit: f64,
  pub consumed_total: f64,
  pub per_key: Vec<KeyUsageJs>,
}

/// `PoolUsageSnapshot`.
#[napi(object, object_from_js = false, js_name = "PoolUsageSnapshot")]
pub struct PoolUsageSnapshotJs {
  pub pool_id: String,
  /// ISO-8601.
  pub generated_at: String,
  pub dimensions: Vec<DimensionUsageJs>,
  pub burn_rate: Option<super::burn_rate::BurnRateJs>,
}

/// A driver's snapshot read at `now`, as JS sees it.
pub(crate) fn snapshot_js(snapshot: PoolUsageSnapshot, now: i64) -> PoolUsageSnapshotJs {
  PoolUsageSnapshotJs {
    burn_rate: snapshot.burn_rate(now).map(|rate| (&rate).into()),
    generated_at: iso_from_ms(now),
    dimensions: snapshot.dimensions.to_js(),
    pool_id: snapshot.pool_id,
  }
}

/// One field of the driver choice and where it came from (`key_value settings/quotaStore`,
/// `env QUOTA_STORE_…` or `default`).
#[from_core(crate::engine::driver::ChoiceField)]
pub struct ChoiceField {
  pub value: String,
  pub source: String,
}

/// What the host's setting and the environment ask of the driver choice (`quota-engine
/// doctor`; the engine chooses from the same report).
#[from_core(crate::engine::driver::ChoiceDescription)]
pub struct StoreChoiceInfo {
  pub driver: ChoiceField,
  pub redis_url: ChoiceField,
  #[napi(ts_type = "'sqlite' | 'redis'")]
  pub effective: String,
  pub problems: Vec<String>,
  /// The raw setting, as given.
  pub setting: Option<String>,
}

/// The driver choice the raw `setting` and the environment make, before any connection.
#[napi(catch_unwind)]
pub fn describe_store_choice(setting: Option<String>) -> StoreChoiceInfo {
  StoreChoiceInfo::from(&engine().describe_store_choice(setting))
}
