//! CONTRACT §7–§8 at the edge: one synchronous crossing per `enforceQuotaShare` and per
//! `recordConsumption` does all of a request's work (pool lookup, plan, every dimension).
//! The JS facade (lib/enforce.js) wraps the result in a settled promise, fetches
//! saturation through the host's async fetchers when the cache asks for it, and emits the
//! `quota.exceeded` event.

use super::burn_rate::now_ms;
use super::db::with_hot_store;
use super::log_queue::{self, LogRecord};
use crate::core::dimensions::{QuotaUnit, QuotaWindow};
use crate::core::enforce::{
  consumption_writes, enforce, ConsumptionCost, EnforceOutcome, QuotaRequest, SaturationLookup,
};
use crate::core::saturation::{
  parse_rate_limit_headers, token_header_saturation, RateLimitSnapshot, SaturationCache,
};
use crate::store::sqlite::{Recorded, SqliteDb};
use napi::bindgen_prelude::Either;
use napi::Env;
use napi_derive::napi;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

pub(crate) struct SaturationState {
  cache: SaturationCache,
  /// Providers with a host fetcher (`"*"`: every provider).
  fetchers: HashSet<String>,
  /// `(provider, connectionId)` → the last rate-limit headers seen.
  headers: HashMap<(String, String), RateLimitSnapshot>,
}

static SATURATION: Mutex<Option<SaturationState>> = Mutex::new(None);

pub(crate) fn with_saturation<T>(f: impl FnOnce(&mut SaturationState) -> T) -> T {
  let mut guard = SATURATION.lock().unwrap_or_else(|e| e.into_inner());
  let state = guard.get_or_insert_with(|| SaturationState {
    cache: SaturationCache::default(),
    fetchers: HashSet::new(),
    headers: HashMap::new(),
  });
  f(state)
}

impl SaturationState {
  fn has_fetcher(&self, provider: &str) -> bool {
    self.fetchers.contains(provider) || self.fetchers.contains("*")
  }

  /// The fallback when no fetcher serves the provider: the token headers, else 0.
  fn fallback(&self, provider: &str, connection_id: &str, now: i64) -> f64 {
    self
      .headers
      .get(&(provider.to_string(), connection_id.to_string()))
      .and_then(|snapshot| token_header_saturation(snapshot, now))
      .map_or(0.0, |s| s.saturation)
  }
}

pub(crate) struct Lookup<'a> {
  pub state: &'a mut SaturationState,
  pub now: i64,
}

impl SaturationLookup for Lookup<'_> {
  fn saturation(
    &self,
    connection_id: &str,
    provider: &str,
    unit: QuotaUnit,
    window: QuotaWindow,
  ) -> Option<f64> {
    if let Some(hit) = self
      .state
      .cache
      .get(provider, connection_id, unit, window, self.now)
    {
      return Some(hit);
    }
    if self.state.has_fetcher(provider) {
      return None;
    }
    Some(self.state.fallback(provider, connection_id, self.now))
  }
}

/// What one enforce crossing found. `kind` is `allow`, `block`, or `fetch` (saturation
/// of `fetch` must be fetched, stored with `putSaturation`, and the call repeated).
#[napi(object, object_from_js = false)]
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
  /// Log records produced since the last crossing.
  pub logs: Option<Vec<LogRecord>>,
  /// Reserve mode only: the reservation an allow made (see `reserveStep`).
  pub reservation: Option<String>,
}

fn step(kind: &str) -> EnforceStep {
  EnforceStep {
    kind: kind.to_string(),
    deprioritize: None,
    reason: None,
    code: None,
    retry_after_seconds: None,
    fetch: None,
    logs: log_queue::take(),
    reservation: None,
  }
}

/// The crossing's answer for an outcome (or an error, as `kind: "error"`).
pub(crate) fn step_of(outcome: crate::error::Result<EnforceOutcome>) -> EnforceStep {
  match outcome {
    Ok(EnforceOutcome::Allow { deprioritize }) => EnforceStep {
      deprioritize,
      ..step("allow")
    },
    Ok(EnforceOutcome::Block {
      reason,
      message,
      retry_after_seconds,
    }) => EnforceStep {
      reason: Some(message),
      code: Some(reason.as_str().to_string()),
      retry_after_seconds,
      ..step("block")
    },
    Ok(EnforceOutcome::NeedSaturation(dims)) => EnforceStep {
      fetch: Some(
        dims
          .iter()
          .map(|d| vec![d.unit.as_str().to_string(), d.window.as_str().to_string()])
          .collect(),
      ),
      ..step("fetch")
    },
    Err(err) => EnforceStep {
      reason: Some(err.to_string()),
      ..step("error")
    },
  }
}

/// The request time: `now` when given (tests), else the clock.
/// The request of a hot-path crossing; an empty model counts as none.
pub(crate) fn quota_request<'a>(
  api_key_id: &'a str,
  connection_id: &'a str,
  provider: &'a str,
  model: &'a Option<String>,
) -> QuotaRequest<'a> {
  QuotaRequest {
    api_key_id,
    connection_id,
    provider,
    model: model.as_deref().filter(|m| !m.is_empty()),
  }
}

pub(crate) fn request_time(now: Option<f64>) -> i64 {
  now
    .filter(|t| t.is_finite())
    .map_or_else(now_ms, |t| t as i64)
}

/// One enforce crossing. An allow is answered with a number, so the common path builds no
/// object: `0` allow (not enforced), `1` allow, `2` allow deprioritized — unless log
/// records wait to be handed over. Everything else is an [`EnforceStep`]; errors come as
/// `kind: "error"`, so the facade fails open and logs once, without an exception crossing
/// the boundary.
#[napi(catch_unwind, ts_return_type = "0 | 1 | 2 | EnforceStep")]
pub fn enforce_step(
  env: Env,
  api_key_id: String,
  connection_id: String,
  provider: String,
  model: Option<String>,
  saturation_threshold: f64,
  now: Option<f64>,
) -> Either<u32, EnforceStep> {
  let now = request_time(now);
  let request = quota_request(&api_key_id, &connection_id, &provider, &model);
  let outcome = with_hot_store(&env, |db| {
    decide_on(db, &request, saturation_threshold, now)
  });
  match outcome {
    Ok(EnforceOutcome::Allow { deprioritize }) if !log_queue::pending() => {
      Either::A(match deprioritize {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
      })
    }
    outcome => Either::B(step_of(outcome)),
  }
}

/// The decision on the engine's connection: from memory when nothing was committed since
/// the last call, else in one read transaction for every statement of it (one set of lock
/// calls).
pub(crate) fn decide_on(
  db: &SqliteDb,
  request: &QuotaRequest<'_>,
  saturation_threshold: f64,
  now: i64,
) -> crate::error::Result<EnforceOutcome> {
  db.hot_scope(|db| {
    with_saturation(|state| {
      enforce(
        db,
        &Lookup { state, now },
        request,
        saturation_threshold,
        now,
      )
    })
  })
}

/// One record crossing: every plan dimension and the model bucket, buffered (committed
/// with the buffer on the next turn of the event loop, see `store/sqlite/record_buffer.rs`), or
/// committed at once when `flushAfterMs` is 0. Returns `null` when committed or when there
/// was nothing to write, `true` when buffered — the caller then schedules
/// `flushQuotaWrites()` on its event loop — or the error message (the writes are kept, for
/// the next flush, unless they were invalid).
#[napi(catch_unwind, ts_return_type = "null | true | string")]
#[allow(clippy::too_many_arguments)]
pub fn record_step(
  env: Env,
  api_key_id: String,
  connection_id: String,
  provider: String,
  model: Option<String>,
  tokens: Option<f64>,
  usd: Option<f64>,
  requests: Option<f64>,
  flush_after_ms: f64,
  now: Option<f64>,
) -> Option<Either<bool, String>> {
  let now = request_time(now);
  let request = quota_request(&api_key_id, &connection_id, &provider, &model);
  let cost = ConsumptionCost {
    tokens,
    usd,
    requests,
  };
  let max_age = Duration::from_secs_f64(if flush_after_ms.is_finite() {
    flush_after_ms.clamp(0.0, 60_000.0) / 1000.0
  } else {
    0.0
  });
  let result = with_hot_store(&env, |db| {
    let writes = db.hot_scope(|db| consumption_writes(db, &request, &cost))?;
    db.record_writes(&api_key_id, &writes, now, max_age)
  });
  match result {
    Ok(Recorded::Buffered) => {
      flush_at_teardown(&env);
      Some(Either::A(true))
    }
    Ok(_) => None,
    Err(err) => {
      flush_at_teardown(&env);
      Some(Either::B(err.to_string()))
    }
  }
}

thread_local! {
  static TEARDOWN_FLUSH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Once per JS thread that buffered a record: commit the buffer when its environment is
/// torn down — a worker terminated (its `exit` event does not run) or the process
/// exiting by a path that skips the facade's `exit` hook.
fn flush_at_teardown(env: &Env) {
  if TEARDOWN_FLUSH.with(|done| done.replace(true)) {
    return;
  }
  let _ = env.add_env_cleanup_hook((), |()| {
    let _ = crate::store::sqlite::with_hot_open_db(|db| db.flush_pending(false));
  });
}

/// Commits `recordConsumption`'s buffered writes now. Returns the error message, or `null`
/// (the writes stay buffered on an error, for the next flush). Never opens the database:
/// with none open (closed, or its file deleted) there is nothing to commit.
#[napi(catch_unwind)]
pub fn flush_quota_writes() -> Option<String> {
  crate::store::sqlite::with_hot_open_db(|db| db.flush_pending(true))
    .and_then(|result| result.err())
    .map(|e| e.to_string())
}

/// How many counters are buffered, not yet committed.
#[napi(catch_unwind)]
pub fn pending_quota_writes() -> u32 {
  crate::store::sqlite::with_hot_open_db(|db| Ok(db.pending_count()))
    .and_then(|r| r.ok())
    .unwrap_or(0) as u32
}

/// Registers which providers have a host saturation fetcher (`"*"` for all).
#[napi(catch_unwind)]
pub fn set_saturation_fetcher_providers(providers: Vec<String>) {
  with_saturation(|state| state.fetchers = providers.into_iter().collect());
}

/// Stores a fetched saturation (clamped 0..1, NaN → 0) for 30 s; returns the stored value.
#[napi(catch_unwind)]
pub fn put_saturation(
  provider: String,
  connection_id: String,
  unit: String,
  window: String,
  value: f64,
  now: Option<f64>,
) -> f64 {
  let now = request_time(now);
  let (Some(unit), Some(window)) = (QuotaUnit::parse(&unit), QuotaWindow::parse(&window)) else {
    return 0.0;
  };
  with_saturation(|state| {
    state
      .cache
      .put(&provider, &connection_id, unit, window, value, now)
  })
}

/// The cached saturation, or `null` on a miss.
#[napi(catch_unwind)]
pub fn cached_saturation(
  provider: String,
  connection_id: String,
  unit: String,
  window: String,
  now: Option<f64>,
) -> Option<f64> {
  let now = request_time(now);
  let (unit, window) = (QuotaUnit::parse(&unit)?, QuotaWindow::parse(&window)?);
  with_saturation(|state| {
    state
      .cache
      .get(&provider, &connection_id, unit, window, now)
  })
}

/// `_clearSaturationCache()`.
#[napi(catch_unwind, js_name = "_clearSaturationCache")]
pub fn clear_saturation_cache() {
  with_saturation(|state| state.cache.clear());
}

/// `_clearRateLimitHeaders()`.
#[napi(catch_unwind, js_name = "_clearRateLimitHeaders")]
pub fn clear_rate_limit_headers() {
  with_saturation(|state| state.headers.clear());
}

/// Records an upstream response's rate-limit headers (`[name, value]` pairs).
#[napi(catch_unwind)]
pub fn store_rate_limit_header_pairs(
  connection_id: String,
  provider: String,
  pairs: Vec<Vec<String>>,
  now: Option<f64>,
) {
  let now = request_time(now);
  let parsed = parse_rate_limit_headers(
    pairs
      .iter()
      .filter(|p| p.len() == 2)
      .map(|p| (p[0].as_str(), p[1].as_str())),
    now,
  );
  if let Some(snapshot) = parsed {
    with_saturation(|state| {
      if state.headers.len() >= 10_000 {
        state.headers.clear();
      }
      state.headers.insert((provider, connection_id), snapshot);
    });
  }
}

/// `{ saturation, resetAt }` (resetAt as epoch ms, or null).
#[napi(object, object_from_js = false)]
pub struct TokenHeaderSaturationJs {
  pub saturation: f64,
  pub reset_at_ms: Option<f64>,
}

/// The token-header fallback signal: `used / limit` from headers at most 5 min old.
#[napi(catch_unwind)]
pub fn token_header_saturation_of(
  provider: String,
  connection_id: String,
  now: Option<f64>,
) -> Option<TokenHeaderSaturationJs> {
  let now = request_time(now);
  with_saturation(|state| {
    let snapshot = state.headers.get(&(provider, connection_id))?;
    let value = token_header_saturation(snapshot, now)?;
    Some(TokenHeaderSaturationJs {
      saturation: value.saturation,
      reset_at_ms: value.reset_at_ms.map(|t| t as f64),
    })
  })
}
