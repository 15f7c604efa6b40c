//! The hot path (docs/contract.md §7): one crossing per `enforceQuotaShare`, per
//! `recordConsumption` and per reservation release. The engine decides, counts and fails
//! open; this file shapes its answers: a plain allow is a number (`0` not enforced, `1`
//! allow, `2` deprioritized), so the common path builds no object; the rest an
//! [`EnforceStep`]. SQLite answers at once, Redis with a promise of the same.

use super::crossing;
use super::host::{prepare_db, prepare_db_to_buffer, prepare_db_to_flush, take_logs, LogRecordJs};
use super::{engine, errors::or_throw};
use crate::core::enforce::ConsumptionCost;
use crate::engine::clock;
use crate::engine::hot_path::{Buffered, Decision, EnforceCall, RecordCall, RequestIds};
use crate::engine::saturation::{refreshes_as_text, take_refreshes};
use crate::engine::Step;
use napi::bindgen_prelude::{Either, PromiseRaw};
use napi::Env;
use napi_derive::napi;

/// An enforce answer that is not a plain allow. On `fetch`: fetch the saturation of
/// `fetch` through the host's fetchers, then cross again with `startedMs` and `afterFetch`.
#[napi(object, object_from_js = false)]
#[derive(Default)]
pub struct EnforceStep {
  #[napi(ts_type = "'allow' | 'block' | 'fetch'")]
  pub kind: String,
  pub deprioritize: Option<bool>,
  /// The block message.
  pub reason: Option<String>,
  /// The block's reason code, for the `quota.exceeded` event.
  pub code: Option<String>,
  pub retry_after_seconds: Option<f64>,
  /// `[unit, window]` pairs to fetch.
  pub fetch: Option<Vec<Vec<String>>>,
  /// When the decision began (monotonic ms), to pass back when crossing again.
  pub started_ms: Option<f64>,
  /// Reserve mode: the reservation an allow made.
  pub reservation: Option<String>,
  /// Log records produced since the last crossing.
  pub logs: Option<Vec<LogRecordJs>>,
  /// Saturation entries served stale: refresh each in the background
  /// (`[provider, connectionId, unit, window, fetcher name]`).
  pub refresh: Option<Vec<Vec<String>>>,
}

/// An enforce answer: an allow code, or the step.
type Shaped = Either<u32, EnforceStep>;

fn shaped(decision: Decision) -> Shaped {
  let logs = take_logs();
  let refresh = take_refreshes().map(refreshes_as_text);
  let step = match decision {
    Decision::Allow {
      deprioritize,
      reservation: None,
    } if logs.is_none() && refresh.is_none() => {
      return Either::A(match deprioritize {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
      })
    }
    Decision::Allow {
      deprioritize,
      reservation,
    } => EnforceStep {
      kind: "allow".into(),
      deprioritize,
      reservation,
      ..Default::default()
    },
    Decision::Block {
      reason,
      message,
      retry_after_seconds,
    } => EnforceStep {
      kind: "block".into(),
      reason: Some(message),
      code: Some(reason.as_str().into()),
      retry_after_seconds,
      ..Default::default()
    },
    Decision::Fetch { dims, started_ms } => EnforceStep {
      kind: "fetch".into(),
      fetch: Some(
        dims
          .iter()
          .map(|(u, w)| vec![u.as_str().to_string(), w.as_str().to_string()])
          .collect(),
      ),
      started_ms: Some(started_ms),
      ..Default::default()
    },
  };
  Either::B(EnforceStep {
    logs,
    refresh,
    ..step
  })
}

/// A crossing's ids: absent ones empty (not enforced), `model` kept absent.
fn request_ids(
  key: Option<String>,
  connection: Option<String>,
  provider: Option<String>,
  model: Option<String>,
) -> RequestIds {
  RequestIds {
    api_key_id: key.unwrap_or_default(),
    connection_id: connection.unwrap_or_default(),
    provider: provider.unwrap_or_default(),
    model,
  }
}

/// `enforceQuotaShare`'s crossing. Empty or absent ids are not enforced.
#[napi(
  catch_unwind,
  ts_return_type = "0 | 1 | 2 | EnforceStep | Promise<0 | 1 | 2 | EnforceStep>"
)]
#[allow(clippy::too_many_arguments)]
pub fn enforce<'env>(
  env: &'env Env,
  #[napi(ts_arg_type = "string | undefined | null")] api_key_id: Option<String>,
  #[napi(ts_arg_type = "string | undefined | null")] connection_id: Option<String>,
  #[napi(ts_arg_type = "string | undefined | null")] provider: Option<String>,
  #[napi(ts_arg_type = "string | undefined | null")] model: Option<String>,
  estimated_usd: Option<f64>,
  estimated_tokens: Option<f64>,
  started_ms: Option<f64>,
  after_fetch: Option<bool>,
  now_ms: Option<f64>,
) -> napi::Result<Either<Shaped, PromiseRaw<'env, Shaped>>> {
  let file_checked = prepare_db(env);
  let call = EnforceCall {
    ids: request_ids(api_key_id, connection_id, provider, model),
    estimated_usd,
    estimated_tokens,
    now_ms: clock(now_ms),
    started_ms: started_ms.filter(|t| t.is_finite()),
    after_fetch: after_fetch.unwrap_or(false),
    file_checked,
  };
  crossing(env, engine().enforce(call), shaped)
}

thread_local! {
  static TEARDOWN_FLUSH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Once per JS thread that buffered a record: commit the buffer when its environment is
/// torn down (a worker terminated, or an exit that skips the facade's `exit` hook).
pub(crate) fn flush_at_teardown(env: &Env) {
  if TEARDOWN_FLUSH.with(|done| done.replace(true)) {
    return;
  }
  let _ = env.add_env_cleanup_hook((), |()| engine().commit_at_teardown());
}

/// A record's answer: bit 0, buffered (schedule the commit); bit 1, log records wait; bit
/// 2, records are buffered for Redis (commit them at a signal).
fn recorded(buffered: Buffered) -> u32 {
  let engine = engine();
  u32::from(buffered)
    | if engine.logs.pending() { 2 } else { 0 }
    | if engine.redis_writes.used() { 4 } else { 0 }
}

/// `recordConsumption`'s crossing, answering now or as a promise: bit 0 set when buffered
/// (schedule the commit), bit 1 when log records wait, bit 2 when records are buffered for
/// Redis. With a reservation (reserve mode), settles it with the cost instead.
#[napi(catch_unwind, ts_return_type = "number | Promise<number>")]
#[allow(clippy::too_many_arguments)]
pub fn record<'env>(
  env: &'env Env,
  #[napi(ts_arg_type = "string | undefined | null")] api_key_id: Option<String>,
  #[napi(ts_arg_type = "string | undefined | null")] connection_id: Option<String>,
  #[napi(ts_arg_type = "string | undefined | null")] provider: Option<String>,
  #[napi(ts_arg_type = "string | undefined | null")] model: Option<String>,
  tokens: Option<f64>,
  usd: Option<f64>,
  requests: Option<f64>,
  reservation: Option<String>,
  now_ms: Option<f64>,
) -> napi::Result<Either<u32, PromiseRaw<'env, u32>>> {
  if reservation.is_some() {
    prepare_db(env);
  } else {
    prepare_db_to_buffer(env);
  }
  let finite = |v: Option<f64>| v.filter(|v| v.is_finite());
  let call = RecordCall {
    ids: request_ids(api_key_id, connection_id, provider, model),
    cost: ConsumptionCost {
      tokens: finite(tokens),
      usd: finite(usd),
      requests: finite(requests),
    },
    reservation,
    now_ms: clock(now_ms),
  };
  let step = engine().record(call);
  if matches!(step, Step::Now(true)) {
    flush_at_teardown(env);
  }
  crossing(env, step, recorded)
}

/// `releaseReservation(reservation)`'s crossing: subtracts what it reserved (never below 0).
/// A value that is not a reservation is an `ERR_QUOTA_INVALID_ARG`; a store failure is logged.
#[napi(catch_unwind, ts_return_type = "number | Promise<number>")]
pub fn release_reservation<'env>(
  env: &'env Env,
  reservation: napi::bindgen_prelude::Unknown,
  now_ms: Option<f64>,
) -> napi::Result<Either<u32, PromiseRaw<'env, u32>>> {
  let text = or_throw(
    env,
    super::args::arg(reservation, "reservation").and_then(|r| r.string()),
  )?;
  prepare_db(env);
  let step = or_throw(
    env,
    engine().settle(&text, None, ConsumptionCost::default(), true, clock(now_ms)),
  )?;
  crossing(env, step, recorded)
}

/// A failure the glue caught: logged once per fault, and for `enforce` counted as fail-open.
#[napi(
  catch_unwind,
  ts_args_type = "operation: 'enforce' | 'record', message: string, error: string, apiKeyId?: string"
)]
pub fn fail_open(operation: String, message: String, error: String, api_key_id: Option<String>) {
  engine().failed_in_glue(operation == "enforce", &message, &error, api_key_id);
}

/// Commits the buffered records now: `null`, or the error (they stay buffered). Opens the
/// database only for records carried from a replaced file.
#[napi(catch_unwind)]
pub fn flush_quota_writes(env: Env) -> Option<String> {
  prepare_db_to_flush(&env);
  engine().flush(true)
}

/// The facade's flush timer: commits once the oldest record is `QUOTA_RECORD_FLUSH_MS` old;
/// the milliseconds until the next call, or `-1` when nothing is buffered.
#[napi(catch_unwind)]
pub fn flush_due_quota_writes(env: Env) -> f64 {
  prepare_db_to_flush(&env);
  engine().flush_when_due()
}

/// How many counters are buffered, not yet committed.
#[napi(catch_unwind)]
pub fn pending_quota_writes() -> u32 {
  engine().pending_writes() as u32
}
