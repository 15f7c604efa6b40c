//! The test edge: native functions for the tests and benches alone, compiled only with the
//! `test-hooks` feature, apart from the edge that ships (docs/architecture.md#test-and-bench-hooks).

use crate::binding::errors::or_throw;
use crate::binding::spawn_settled;
use crate::binding::{engine, host::prepare_db, with_db};
use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;
use quota_engine_macros::{edge, from_core};

/// Panics inside the edge, which `#[napi(catch_unwind)]` throws as an `Error` with
/// `code: "GenericFailure"`. `how`: `"store"` panics inside a write transaction on the
/// engine's connection, after adding 1 to `apiKeyId`'s counter of `poolId:requests:hourly`
/// — the connection's mutex is poisoned and the transaction left open, which the next call
/// must roll back and recover from; anything else panics at once.
#[napi(
  catch_unwind,
  js_name = "__forcePanicForTests",
  ts_args_type = "how?: 'now' | 'store', apiKeyId?: string, poolId?: string"
)]
pub fn force_panic_for_tests(
  env: Env,
  how: Option<String>,
  api_key_id: Option<String>,
  pool_id: Option<String>,
) -> napi::Result<()> {
  if how.as_deref() != Some("store") {
    panic!("forced panic for tests");
  }
  let api_key_id = api_key_id.unwrap_or_else(|| "panic-key".into());
  let pool_id = pool_id.unwrap_or_else(|| "panic-pool".into());
  prepare_db(&env);
  or_throw(
    &env,
    engine().panic_in_write_for_tests(&api_key_id, pool_id),
  )
}

/// Opens (`hold = true`) or ends (`false`) a read transaction on the engine's connection,
/// so a test can show that the engine's WAL read lock survives the host opening and closing
/// the same file. Nothing else may use the engine while it is held.
#[edge(js_name = "__holdReadTransactionForTests")]
pub fn hold_read_transaction_for_tests(#[typed] hold: bool) {
  prepare_db(&env);
  engine().hold_read_transaction_for_tests(hold)
}

/// Runs the engine's migration check on its connection now (what it does at open and when
/// another connection changed the schema); whether anything was created.
#[edge(js_name = "__checkSchemaForTests")]
pub fn check_schema_for_tests() -> bool {
  with_db(&env, |db| db.check_schema())
}

/// The enforce decision made on the addon's tokio worker thread instead of the JS thread,
/// resolving to its kind (`"allow"`, `"block"`, `"fetch"`, or `"error: …"`): the worker-hop
/// option of the hot path, for `npm run bench` to set beside the synchronous crossing the
/// engine uses. The connection must be open (any engine call opens it).
#[napi(
  catch_unwind,
  js_name = "__enforceOnWorkerForBench",
  ts_return_type = "Promise<string>"
)]
pub fn enforce_on_worker_for_bench<'env>(
  env: &'env Env,
  api_key_id: String,
  connection_id: String,
  provider: String,
  saturation_threshold: f64,
) -> napi::Result<PromiseRaw<'env, String>> {
  let decide = async move {
    Ok(engine().decision_kind_for_bench(
      &api_key_id,
      &connection_id,
      &provider,
      saturation_threshold,
    ))
  };
  spawn_settled(env, decide, |_, kind| Ok(kind))
}

/// Tests only: how much the scheduler holds — interned names, in-flight slots,
/// connections with saturated buckets, combos with DRR state and their DRR deficits.
#[from_core(crate::engine::test_hooks::SchedulerSizes)]
pub struct SchedulerSizes {
  pub symbols: u32,
  pub inflight: u32,
  pub bucket_connections: u32,
  pub drr_combos: u32,
  pub drr_keys: u32,
}

/// Tests only: see [`SchedulerSizes`].
#[napi(catch_unwind, js_name = "__schedulerSizesForTests")]
pub fn scheduler_sizes_for_tests() -> SchedulerSizes {
  SchedulerSizes::from(&engine().scheduler_sizes_for_tests())
}

/// Tests only: how many times the engine has checked that its connection's file is still
/// the one at the path (docs/sqlite.md#one-connection-per-process).
#[napi(catch_unwind, js_name = "__fileChecksForTests")]
pub fn file_checks_for_tests() -> f64 {
  (crate::engine::test_hooks::FILE_CHECKS).load(std::sync::atomic::Ordering::Relaxed) as f64
}

/// Tests only: how many times the engine has tried to open its database.
#[napi(catch_unwind, js_name = "__opensForTests")]
pub fn opens_for_tests() -> f64 {
  crate::engine::test_hooks::OPENS.load(std::sync::atomic::Ordering::Relaxed) as f64
}

/// Tests only: one pass of the retention sweep on a thread of its own, as its thread runs it
/// every hour.
#[napi(catch_unwind, js_name = "__sweepOnAThreadForTests")]
pub fn sweep_on_a_thread_for_tests() {
  std::thread::spawn(|| engine().sweep_in_background());
}

/// Bench only: napi-rs's own serde conversion (`Env::from_js_value`) of `value` into a
/// `serde_json::Value`, to weigh it against the edge's reader (bench/pure.mjs); the number
/// of top-level entries.
#[napi(js_name = "__fromJsValueForBench")]
pub fn from_js_value_for_bench(
  env: Env,
  value: napi::bindgen_prelude::Unknown,
) -> napi::Result<u32> {
  let value: serde_json::Value = env.from_js_value(value)?;
  Ok(value.as_object().map_or(0, |object| object.len() as u32))
}
