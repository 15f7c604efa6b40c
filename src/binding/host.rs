//! Host services (docs/contract.md §0, §8, §11, §12): the database path, the saturation
//! fetchers, cache and headers, the settings, the log records and the metrics text.

use super::engine;
use super::errors::or_throw;
use crate::engine::config;
use crate::engine::database::PathSource;
use crate::engine::input::{self, clock};
use crate::engine::saturation::{FetcherTier, Lookup};
use crate::engine::telemetry::LogRecord;
use napi::bindgen_prelude::{Either, Function, FunctionRef, Unknown};
use napi::Env;
use napi_derive::napi;
use quota_engine_macros::from_core;
use std::cell::RefCell;

thread_local! {
  /// The `dbPath` resolver, on the JS thread that installed it.
  static RESOLVER: RefCell<Option<FunctionRef<(), Unknown<'static>>>> = const { RefCell::new(None) };
  /// Whether this thread's teardown forgets it as a host thread.
  static HOST_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
  /// When this thread last asked a resolver that had named no path yet.
  static ASKED_AT: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// How often a resolver that has named no path yet is asked again: one that throws until
/// the host is ready (or for good) costs a throw per interval, not one per call.
const ASK_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// Sets where the database is, for every thread, from the next call: a path, a function
/// returning one (called now, whenever this thread is about to open it, and until it names
/// a path before a call at most every 100 ms; other threads use its last answer), or
/// `undefined` for `$DATA_DIR/storage.sqlite`.
#[napi(catch_unwind, ts_args_type = "dbPath?: string | (() => string)")]
pub fn configure_db_path(env: Env, db_path: Option<Unknown>) -> napi::Result<()> {
  let read = input::Arg::maybe(db_path, "options.dbPath").and_then(|arg| input::db_path(&arg));
  let (source, resolver) = match (or_throw(&env, read)?, db_path) {
    (Some(source), _) => (source, None),
    (None, Some(function)) => {
      // SAFETY: `db_path` was read as a function (`input::db_path` is `None` only then).
      let function = unsafe { function.cast::<Function<(), Unknown>>() }?;
      (
        PathSource::Resolver { last: None },
        Some(function.create_ref()?),
      )
    }
    (None, None) => (PathSource::Default, None),
  };
  // From inside this thread's resolver (its `dbPath` calling `installHost`): the resolver
  // is in use, so nothing may replace it.
  if RESOLVER.with(|slot| slot.try_borrow_mut().is_err()) {
    return Err(napi::Error::from_reason(
      "installHost cannot be called from inside its own dbPath function",
    ));
  }
  host_thread(&env)?;
  let has_resolver = resolver.is_some();
  if !engine()
    .database
    .set_source(source, std::thread::current().id())
  {
    // Another thread's explicit path stays: this thread installed none of its own.
    return Ok(());
  }
  RESOLVER.with(|slot| *slot.borrow_mut() = resolver);
  if has_resolver {
    // A problem now is said at the open (the host may not be ready yet).
    resolve_now(&env, false);
  }
  Ok(())
}

/// This thread installed the host: the log records made on it are its own
/// ([`LogQueue`](crate::engine::telemetry::LogQueue)) until its environment is torn down.
fn host_thread(env: &Env) -> napi::Result<()> {
  let thread = std::thread::current().id();
  engine().logs.host_thread(thread, true);
  if !HOST_THREAD.with(|hooked| hooked.replace(true)) {
    env.add_env_cleanup_hook(thread, |thread| engine().logs.host_thread(thread, false))?;
  }
  Ok(())
}

/// Before a call that may open the database: asks this thread's resolver for the path when
/// the connection is closed or its file was replaced (which closes it). Whether the open
/// connection's file was checked and is still the one at the path.
pub(crate) fn prepare_db(env: &Env) -> bool {
  let database = &engine().database;
  if !has_resolver(env) {
    return false;
  }
  if database.needs_open() {
    resolve_now(env, true);
    return false;
  }
  true
}

/// Before a store call, which looks the path up itself (`Access::Full`): [`prepare_db`]
/// with the path looked up now, so a file replaced a moment ago is reopened at the path
/// the function answers now.
pub(crate) fn prepare_db_for_store(env: &Env) {
  let database = &engine().database;
  if has_resolver(env) && database.needs_open_now() {
    resolve_now(env, true);
  }
}

/// Before a record: the path is asked for only when the connection is closed. A record
/// that only adds to the buffer checks no file (`Access::Buffer`); a commit of the buffer,
/// the record's own or the flush's, looks the path up first.
pub(crate) fn prepare_db_to_buffer(env: &Env) {
  let database = &engine().database;
  if has_resolver(env) && !database.is_open() {
    resolve_now(env, true);
  }
}

/// Before a flush, which opens the database only to commit records carried from a replaced
/// file to the file now at the path: the path is asked for when the file may have been
/// replaced (the connection is open) or records were carried.
pub(crate) fn prepare_db_to_flush(env: &Env) {
  let database = &engine().database;
  if database.is_open() || database.carried_count() > 0 {
    prepare_db(env);
  }
}

/// Whether the path comes from a resolver. While the connection is open on the default
/// path because the resolver has named none yet, it is asked again first, at most every
/// [`ASK_AGAIN_AFTER`]: once it names the host's file, the connection moves there. (A
/// closed one asks when it opens.)
fn has_resolver(env: &Env) -> bool {
  let database = &engine().database;
  if database.awaits_path() && database.is_open() {
    let now = std::time::Instant::now();
    let due = ASKED_AT.with(|at| {
      let due = at.get().is_none_or(|asked| now - asked >= ASK_AGAIN_AFTER);
      if due {
        at.set(Some(now));
      }
      due
    });
    if due {
      resolve_now(env, false);
    }
  }
  database.has_resolver()
}

/// Asks this thread's resolver, if any, for the path; `report`: say what is wrong with it.
fn resolve_now(env: &Env, report: bool) {
  let database = &engine().database;
  let answer = RESOLVER.with(|slot| {
    // Held while it runs: a call it makes into the engine is refused, not a recursion.
    let Ok(mut slot) = slot.try_borrow_mut() else {
      return Some(Err("called the engine from inside itself".into()));
    };
    if !database.resolves_on(std::thread::current().id()) {
      // Replaced by a later `installHost` on another thread: never asked again.
      *slot = None;
      return None;
    }
    let resolver = slot.as_ref()?;
    let returned = resolver.borrow_back(env).and_then(|f| f.call(()));
    Some(match returned {
      Err(err) => Err(format!("threw: {}", err.reason)),
      Ok(value) => input::resolved_path(&value),
    })
  });
  if let Some(answer) = answer.filter(|answer| report || answer.is_ok()) {
    database.resolved(&engine().logs, answer);
  }
}

/// The default database path (`$DATA_DIR/storage.sqlite`, or the host's default data dir).
#[napi(catch_unwind)]
pub fn default_db_path() -> String {
  crate::engine::database::default_path()
    .to_string_lossy()
    .into_owned()
}

/// Replaces the providers `tier` has saturation fetchers for (`"*"`: every provider).
#[napi(
  catch_unwind,
  ts_args_type = "tier: 'host' | 'seam', providers: string[]"
)]
pub fn set_saturation_fetchers(tier_name: String, providers: Vec<String>) -> napi::Result<()> {
  let tier = FetcherTier::parse(&tier_name).ok_or_else(|| {
    napi::Error::new(
      napi::Status::InvalidArg,
      "tier: expected \"host\" or \"seam\"",
    )
  })?;
  engine().saturation().set_fetchers(tier, providers);
  Ok(())
}

/// `getSaturation`'s first step: the value (cached, or the fallback), or the name of the
/// fetcher to call (`"host:<p>"`, `"seam:<p>"`).
#[napi(catch_unwind)]
pub fn saturation_lookup(
  provider: String,
  connection_id: String,
  unit: String,
  window: String,
  now_ms: Option<f64>,
) -> Either<f64, String> {
  let now = clock(now_ms);
  match engine().saturation_lookup(&provider, &connection_id, &unit, &window, now) {
    Lookup::Known { value, .. } => Either::A(value),
    Lookup::Fetch { name } => Either::B(name),
  }
}

/// `QUOTA_SATURATION_FETCH_TIMEOUT_MS`: how long a saturation fetch is waited for.
#[napi(catch_unwind)]
pub fn saturation_fetch_timeout_ms() -> f64 {
  engine().number(&config::SATURATION_FETCH_TIMEOUT_MS)
}

/// A saturation fetch timed out: warns once per `(provider, connectionId)` until one answers.
#[napi(catch_unwind)]
pub fn saturation_fetch_timed_out(provider: String, connection_id: String, timeout_ms: f64) {
  engine().saturation_fetch_timed_out(&provider, &connection_id, timeout_ms);
}

/// The background refreshes this thread's lookups asked for since the last answer, or `null`.
#[napi(catch_unwind)]
pub fn take_saturation_refreshes() -> Option<Vec<Vec<String>>> {
  crate::engine::saturation::take_refreshes().map(crate::engine::saturation::refreshes_as_text)
}

/// Stores a fetcher's answer for 30 s (clamped 0..1; `null`/NaN: the token-header fallback,
/// else 0); the stored value.
#[napi(catch_unwind)]
pub fn put_saturation(
  provider: String,
  connection_id: String,
  unit: String,
  window: String,
  value: Option<f64>,
  now_ms: Option<f64>,
) -> f64 {
  let now = clock(now_ms);
  engine().put_saturation(&provider, &connection_id, &unit, &window, value, now)
}

/// The saturation a test seam's usage reading gives `window` (its plan window's for
/// anthropic), or `null`.
#[napi(
  catch_unwind,
  ts_args_type = "usage: unknown, window: string, planWindow: boolean"
)]
pub fn usage_saturation(usage: Unknown, window: String, plan_window: bool) -> Option<f64> {
  input::usage_saturation(
    &super::args::arg(usage, "usage").ok()?,
    &window,
    plan_window,
  )
}

/// `_clearSaturationCache()`.
#[napi(catch_unwind, js_name = "_clearSaturationCache")]
pub fn clear_saturation_cache() {
  engine().saturation().clear_cache();
}

/// `_clearRateLimitHeaders()`.
#[napi(catch_unwind, js_name = "_clearRateLimitHeaders")]
pub fn clear_rate_limit_headers() {
  engine().saturation().clear_headers();
}

/// Records an upstream response's rate-limit headers (`[name, value]` pairs).
#[napi(catch_unwind)]
pub fn store_rate_limit_header_pairs(
  connection_id: String,
  provider: String,
  pairs: Vec<Vec<String>>,
  now_ms: Option<f64>,
) {
  engine().store_rate_limit_headers(connection_id, provider, &pairs, clock(now_ms));
}

/// `{ saturation, resetAt }` (resetAt as epoch ms, or null).
#[from_core(crate::core::saturation::TokenHeaderSaturation)]
pub struct TokenHeaderSaturationJs {
  pub saturation: f64,
  pub reset_at_ms: Option<f64>,
}

/// The token-header fallback signal: `used / limit` from headers at most 5 min old.
#[napi(catch_unwind)]
pub fn token_header_saturation_of(
  provider: String,
  connection_id: String,
  now_ms: Option<f64>,
) -> Option<TokenHeaderSaturationJs> {
  let value = engine().token_header_saturation(&provider, &connection_id, clock(now_ms))?;
  Some(TokenHeaderSaturationJs::from(&value))
}

/// `softPenaltyFactor()`: `QUOTA_SOFT_DEPRIORITIZE_FACTOR` (default 0.7, clamped 0..1).
#[napi(catch_unwind)]
pub fn soft_penalty_factor() -> f64 {
  engine().number(&config::SOFT_DEPRIORITIZE_FACTOR)
}

/// One numeric setting as the environment has it (for `quota-engine doctor`).
#[from_core(config::SettingReport)]
pub struct SettingInfo {
  pub name: String,
  pub raw: Option<String>,
  pub value: f64,
  pub default: f64,
  pub min: f64,
  pub max: f64,
  pub valid: bool,
  pub clamped: bool,
}

/// Every numeric setting as the environment has it, without warning.
#[napi(catch_unwind)]
pub fn describe_settings() -> Vec<SettingInfo> {
  engine()
    .config
    .describe()
    .iter()
    .map(SettingInfo::from)
    .collect()
}

/// One log record (`fields`: spread into the logged object).
#[napi(object, object_from_js = false)]
pub struct LogRecordJs {
  #[napi(ts_type = "'warn' | 'info' | 'debug'")]
  pub level: String,
  pub component: String,
  pub msg: String,
  #[napi(ts_type = "Record<string, string | number>")]
  pub fields: serde_json::Map<String, serde_json::Value>,
}

impl From<LogRecord> for LogRecordJs {
  fn from(record: LogRecord) -> Self {
    LogRecordJs {
      level: record.level.to_string(),
      component: record.component.to_string(),
      msg: record.msg,
      fields: record
        .fields
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.into_json()))
        .collect(),
    }
  }
}

/// The log records produced since the last call, or `null` when there are none.
#[napi(catch_unwind)]
pub fn take_logs() -> Option<Vec<LogRecordJs>> {
  engine()
    .logs
    .take()
    .map(|records| records.into_iter().map(LogRecordJs::from).collect())
}

/// `metrics()`, beyond the host: the hot path's counters in the Prometheus text format
/// 0.0.4 (docs/api.md#metrics). Serve it as `text/plain; version=0.0.4`.
#[napi(catch_unwind)]
pub fn metrics() -> String {
  engine().metrics.render()
}

/// `text` with the password of every `scheme://user:password@` masked (docs/contract.md §12).
#[napi(catch_unwind)]
pub fn mask_secrets(text: String) -> String {
  crate::store::redis::mask_secrets(&text)
}
