//! CONTRACT §7 on the Redis driver: one crossing per `enforceQuotaShare` and per
//! `recordConsumption`, and one Redis round trip.
//!
//! The crossing runs phase one on the JS thread — the pool, the model cap, the plan and the
//! saturation cache, all from SQLite's metadata cache ([`plan_enforce`]) — and returns at
//! once when that decides (no pool, no limits). Otherwise it reads every counter the
//! decision needs (this key's buckets, the pool totals summed over the pool's keys, the
//! model bucket) in one `read.lua` call on the tokio runtime, and the promise resolves to
//! the decision. `recordConsumption` writes every dimension in one `write.lua` call.
//! Failures come back as values (`kind: "error"`, an error message) so the facade fails
//! open; the promises never reject.

use super::db::with_store;
use super::hot_path::{quota_request, request_time, step_of, with_saturation, EnforceStep, Lookup};
use super::promise::ensure_runtime;
use super::redis_store::backend_for;
use crate::core::enforce::{consumption_writes, plan_enforce, ConsumptionCost, EnforceStart};
use crate::store::redis::counters;
use napi::bindgen_prelude::{Either, PromiseRaw};
use napi::Env;
use napi_derive::napi;

/// The enforce crossing on Redis: the step itself when metadata decides (or fails), else a
/// promise of it after one Redis round trip.
#[napi(catch_unwind, ts_return_type = "EnforceStep | Promise<EnforceStep>")]
#[allow(clippy::too_many_arguments)]
pub fn redis_enforce_step<'env>(
  env: &'env Env,
  url: String,
  api_key_id: String,
  connection_id: String,
  provider: String,
  model: Option<String>,
  saturation_threshold: f64,
  now: Option<f64>,
) -> napi::Result<Either<EnforceStep, PromiseRaw<'env, EnforceStep>>> {
  let now = request_time(now);
  let model = model.filter(|m| !m.is_empty());
  let backend = match backend_for(&url) {
    Ok(backend) => backend,
    Err(err) => return Ok(Either::A(step_of(Err(err)))),
  };
  let request = quota_request(&api_key_id, &connection_id, &provider, &model);
  // Metadata in one read transaction, as on SQLite.
  let start = with_store(env, |db| {
    db.read_scope(|db| {
      with_saturation(|state| {
        plan_enforce(
          db,
          &Lookup { state, now },
          &request,
          saturation_threshold,
          now,
        )
      })
    })
  });
  let plan = match start {
    Ok(EnforceStart::Read(plan)) => plan,
    Ok(EnforceStart::Done(outcome)) => return Ok(Either::A(step_of(Ok(outcome)))),
    Err(err) => return Ok(Either::A(step_of(Err(err)))),
  };
  let batch = counters::counter_batch(
    &backend,
    &api_key_id,
    plan.pool().allocations.iter().map(|a| a.api_key_id.clone()),
    plan.reads(),
  );
  ensure_runtime();
  let promise = env.spawn_future_with_callback(
    async move { Ok(counters::read(&backend, &batch).await) },
    move |_, values| {
      let request = quota_request(&api_key_id, &connection_id, &provider, &model);
      Ok(step_of(values.map(|v| plan.decide(&request, &v))))
    },
  )?;
  Ok(Either::B(promise))
}

/// The record crossing on Redis: `null` when there is nothing to write, an error message
/// when the metadata could not be read, else a promise of `null` (written) or the error
/// message, after one Redis round trip.
#[napi(
  catch_unwind,
  ts_return_type = "string | null | Promise<string | null>"
)]
#[allow(clippy::too_many_arguments)]
pub fn redis_record_step<'env>(
  env: &'env Env,
  url: String,
  api_key_id: String,
  connection_id: String,
  provider: String,
  model: Option<String>,
  tokens: Option<f64>,
  usd: Option<f64>,
  requests: Option<f64>,
  now: Option<f64>,
) -> napi::Result<Either<Option<String>, PromiseRaw<'env, Option<String>>>> {
  let now = request_time(now);
  let request = quota_request(&api_key_id, &connection_id, &provider, &model);
  let cost = ConsumptionCost {
    tokens,
    usd,
    requests,
  };
  let prepared = backend_for(&url).and_then(|backend| {
    let writes = with_store(env, |db| {
      db.read_scope(|db| consumption_writes(db, &request, &cost))
    })?;
    if writes.is_empty() {
      return Ok(None);
    }
    counters::consume_many(backend, api_key_id.clone(), writes, now).map(Some)
  });
  match prepared {
    Ok(None) => Ok(Either::A(None)),
    Err(err) => Ok(Either::A(Some(err.to_string()))),
    Ok(Some(write)) => Ok(Either::B({
      ensure_runtime();
      env.spawn_future_with_callback(
        async move { Ok(write.await.err().map(|e| e.to_string())) },
        |_, message| Ok(message),
      )?
    })),
  }
}
