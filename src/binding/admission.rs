//! Atomic admission at the edge (`QUOTA_ADMISSION=reserve`, beyond the contract): the
//! reserve-mode enforce crossing on each driver, and settling or releasing a reservation.
//! One crossing per call, as on the default path; the default path is untouched.

use super::db::with_store;
use super::errors::or_throw;
use super::hot_path::{quota_request, request_time, step_of, with_saturation, EnforceStep, Lookup};
use super::promise::ensure_runtime;
use super::redis_hot_path::redis_enforce_step;
use super::redis_store::backend_for;
use crate::core::admission::{
  compile_checks, estimated_cost, BucketDelta, CheckSide, CompiledAdmission, Reservation,
};
use crate::core::enforce::{
  plan_enforce, planned_writes, BlockReason, ConsumptionCost, EnforceOutcome, EnforcePlan,
  EnforceStart, QuotaRequest,
};
use crate::error::{QuotaError, Result};
use crate::store::redis::counters;
use crate::store::redis::scripts::ScriptCheck;
use napi::bindgen_prelude::{Either, PromiseRaw};
use napi::Env;
use napi_derive::napi;

fn with_reservation(mut step: EnforceStep, reservation: Option<Reservation>) -> EnforceStep {
  if step.kind == "allow" {
    step.reservation = reservation.map(|r| r.encode());
  }
  step
}

/// The reserve-mode enforce crossing on SQLite: the default decision and, on an allow,
/// the estimated cost (`requests` 1, `usd` = `estimatedUsd`, `tokens` = `estimatedTokens`)
/// added to every counter `recordConsumption` would write — in one IMMEDIATE
/// transaction. An allow carries `reservation`, to pass to `recordConsumption` or
/// `releaseReservation`.
#[napi(catch_unwind)]
#[allow(clippy::too_many_arguments)]
pub fn reserve_step(
  env: Env,
  api_key_id: String,
  connection_id: String,
  provider: String,
  model: Option<String>,
  saturation_threshold: f64,
  estimated_usd: Option<f64>,
  estimated_tokens: Option<f64>,
  now: Option<f64>,
) -> EnforceStep {
  let now = request_time(now);
  let request = quota_request(&api_key_id, &connection_id, &provider, &model);
  let estimate = estimated_cost(estimated_usd, estimated_tokens);
  let result = with_store(&env, |db| {
    with_saturation(|state| {
      db.enforce_reserving(
        &Lookup { state, now },
        &request,
        saturation_threshold,
        &estimate,
        now,
      )
    })
  });
  match result {
    Ok((outcome, reservation)) => with_reservation(step_of(Ok(outcome)), reservation),
    Err(err) => step_of(Err(err)),
  }
}

/// The checks as `reserve.lua` takes them.
fn script_checks(compiled: &CompiledAdmission, now: i64) -> Vec<ScriptCheck> {
  compiled
    .checks
    .iter()
    .map(|c| ScriptCheck {
      group: match c.side {
        CheckSide::Read(i) => Some(i),
        CheckSide::Always => None,
      },
      prev_weight: c.prev_weight(now),
      threshold: c.threshold,
    })
    .collect()
}

/// The outcome of a reserve script: the default decision on the values it read, which
/// agrees with the script's checks (`compile_checks` is tested against it); should they
/// ever disagree, the script's admission — what was written — wins.
fn reserved_outcome(
  plan: &EnforcePlan,
  compiled: &CompiledAdmission,
  request: &QuotaRequest<'_>,
  blocked: Option<usize>,
  values: &[crate::core::enforce::Buckets],
) -> EnforceOutcome {
  let decided = plan.decide(request, values);
  match (blocked, decided) {
    (None, allow @ EnforceOutcome::Allow { .. }) => allow,
    (None, _) => EnforceOutcome::Allow {
      deprioritize: Some(false),
    },
    (Some(_), block @ EnforceOutcome::Block { .. }) => block,
    (Some(index), _) => {
      let reason = compiled
        .checks
        .get(index)
        .map_or(BlockReason::GlobalSaturated, |c| c.reason);
      let model = (reason == BlockReason::ModelCap)
        .then_some(request.model)
        .flatten();
      EnforceOutcome::Block {
        reason,
        message: reason.message(request.provider, model),
        retry_after_seconds: None,
      }
    }
  }
}

/// The reserve-mode enforce crossing on Redis: metadata on the JS thread (as the default
/// crossing), then one `reserve.lua` call that reads every counter, evaluates the compiled
/// checks and — when none blocks — adds the reservation, atomically.
#[napi(catch_unwind, ts_return_type = "EnforceStep | Promise<EnforceStep>")]
#[allow(clippy::too_many_arguments)]
pub fn redis_reserve_step<'env>(
  env: &'env Env,
  url: String,
  api_key_id: String,
  connection_id: String,
  provider: String,
  model: Option<String>,
  saturation_threshold: f64,
  estimated_usd: Option<f64>,
  estimated_tokens: Option<f64>,
  now: Option<f64>,
) -> napi::Result<Either<EnforceStep, PromiseRaw<'env, EnforceStep>>> {
  let now = request_time(now);
  let model = model.filter(|m| !m.is_empty());
  let backend = match backend_for(&url) {
    Ok(backend) => backend,
    Err(err) => return Ok(Either::A(step_of(Err(err)))),
  };
  let request = quota_request(&api_key_id, &connection_id, &provider, &model);
  let estimate = estimated_cost(estimated_usd, estimated_tokens);
  let start = with_store(env, |db| {
    db.read_scope(|db| {
      let start = with_saturation(|state| {
        plan_enforce(
          db,
          &Lookup { state, now },
          &request,
          saturation_threshold,
          now,
        )
      })?;
      let writes = match &start {
        EnforceStart::Read(_) => planned_writes(db, &request, &estimate)?,
        EnforceStart::Done(_) => Vec::new(),
      };
      Ok((start, writes))
    })
  });
  let (plan, writes) = match start {
    Ok((EnforceStart::Read(plan), writes)) => (plan, writes),
    Ok((EnforceStart::Done(outcome), _)) => return Ok(Either::A(step_of(Ok(outcome)))),
    Err(err) => return Ok(Either::A(step_of(Err(err)))),
  };
  let Some(compiled) = compile_checks(&plan) else {
    // Saturation unknown: the default crossing answers (a fetch, or a model-cap block).
    return redis_enforce_step(
      env,
      url,
      api_key_id,
      connection_id,
      provider,
      model,
      saturation_threshold,
      Some(now as f64),
    );
  };
  let reservation = (!writes.is_empty()).then(|| Reservation::new(&api_key_id, writes, now));
  let additions = reservation
    .as_ref()
    .map(Reservation::additions)
    .unwrap_or_default();
  let batch = counters::counter_batch(
    &backend,
    &api_key_id,
    plan.pool().allocations.iter().map(|a| a.api_key_id.clone()),
    plan.reads(),
  );
  let checks = script_checks(&compiled, now);
  ensure_runtime();
  let key = api_key_id.clone();
  let promise = env.spawn_future_with_callback(
    async move { Ok(counters::reserve(&backend, &batch, &checks, &key, &additions).await) },
    move |_, result| {
      let request = quota_request(&api_key_id, &connection_id, &provider, &model);
      let outcome = result
        .map(|(blocked, values)| reserved_outcome(&plan, &compiled, &request, blocked, &values));
      Ok(with_reservation(step_of(outcome), reservation))
    },
  )?;
  Ok(Either::B(promise))
}

/// The deltas of settling (`release: false`, with the actual cost) or releasing a
/// reservation; `api_key_id`, when given, must be the reservation's.
fn reservation_deltas(
  reservation: &str,
  api_key_id: Option<&str>,
  cost: ConsumptionCost,
  release: bool,
) -> Result<(String, Vec<BucketDelta>)> {
  let parsed = Reservation::decode(reservation, "reservation")?;
  if let Some(key) = api_key_id {
    if key != parsed.api_key_id {
      return Err(QuotaError::range_error(
        "reservation",
        "was made for another API key",
      ));
    }
  }
  let deltas = if release {
    parsed.release_deltas()
  } else {
    parsed.settle_deltas(&cost)
  };
  Ok((parsed.api_key_id, deltas))
}

/// Settles (`release: false`: adds `actual − reserved` per counter, into the
/// reservation's own buckets) or releases (`release: true`: subtracts what was reserved)
/// a reservation on SQLite, in one transaction; buckets never go below 0. Throws a
/// `RangeError` (`ERR_QUOTA_INVALID_ARG`) for a malformed reservation, or one made for
/// another `apiKeyId`, writing nothing; returns a store error's message, or `null`.
#[napi(catch_unwind)]
#[allow(clippy::too_many_arguments)]
pub fn settle_step(
  env: Env,
  reservation: String,
  api_key_id: Option<String>,
  tokens: Option<f64>,
  usd: Option<f64>,
  requests: Option<f64>,
  release: bool,
  now: Option<f64>,
) -> napi::Result<Option<String>> {
  let now = request_time(now);
  let cost = ConsumptionCost {
    tokens,
    usd,
    requests,
  };
  let (key, deltas) = or_throw(
    &env,
    reservation_deltas(&reservation, api_key_id.as_deref(), cost, release),
  )?;
  let result = with_store(&env, |db| db.add_floored(&key, &deltas, now));
  Ok(result.err().map(|e| e.to_string()))
}

/// `settleStep` on Redis: one `settle.lua` call. Throws for a malformed reservation (as
/// `settleStep`); else `null` when there is nothing to write, or a promise of `null` or
/// the error message.
#[napi(
  catch_unwind,
  ts_return_type = "string | null | Promise<string | null>"
)]
#[allow(clippy::too_many_arguments)]
pub fn redis_settle_step<'env>(
  env: &'env Env,
  url: String,
  reservation: String,
  api_key_id: Option<String>,
  tokens: Option<f64>,
  usd: Option<f64>,
  requests: Option<f64>,
  release: bool,
) -> napi::Result<Either<Option<String>, PromiseRaw<'env, Option<String>>>> {
  let cost = ConsumptionCost {
    tokens,
    usd,
    requests,
  };
  let (key, deltas) = or_throw(
    env,
    reservation_deltas(&reservation, api_key_id.as_deref(), cost, release),
  )?;
  if deltas.is_empty() {
    return Ok(Either::A(None));
  }
  match backend_for(&url).and_then(|backend| counters::settle(backend, key, deltas)) {
    Err(err) => Ok(Either::A(Some(err.to_string()))),
    Ok(write) => Ok(Either::B({
      ensure_runtime();
      env.spawn_future_with_callback(
        async move { Ok(write.await.err().map(|e| e.to_string())) },
        |_, message| Ok(message),
      )?
    })),
  }
}
