//! The storage driver (docs/contract.md §4): one narrow trait, [`QuotaDriver`], that the
//! engine calls for every counter operation, implemented by [`SqliteDriver`]
//! (`engine/database.rs`) and [`RedisDriver`] (`engine/redis_driver.rs`), and how the
//! driver is chosen — by the precedence of §4, again when the host's setting changes; Redis
//! that does not answer a PING within the timeout falls back to SQLite with a warning, so
//! choosing never fails. The drivers hold no policy: `core`'s rules decide, and counting
//! the outcome, failing open and logging faults stay in the engine.

use super::config::{self, STORE_DRIVER, STORE_REDIS_URL};
use super::hot_path::{Buffered, EnforceCall, RecordCall, Settle};
use super::telemetry::LogValue;
use super::{Engine, Step};
use crate::core::dimensions::DimensionKey;
use crate::core::enforce::EnforceOutcome;
use crate::error::{QuotaError, Result};
use crate::store::redis::{mask_url, Backends, KeyLayout, RedisBackend, RedisOptions, Retry};
use crate::store::{PlanDimension, PoolUsageSnapshot};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use super::database::SqliteDriver;
pub use super::redis_driver::RedisDriver;

/// The chosen driver, as the engine holds it. Cloning it is one reference count.
pub type Driver = Arc<dyn QuotaDriver>;

/// What an enforce came to on a driver: the outcome and, in reserve mode, the token of the
/// reservation it made — or the store's fault (the engine fails open on it).
pub type Enforced = Result<(EnforceOutcome, Option<String>)>;

/// What a record did on a driver, for the engine's fault accounting.
#[derive(Debug)]
pub enum Written {
  /// Written, or buffered for the next flush: counted as a success.
  Done,
  /// Nothing to write (no plan dimension matched): neither a success nor a fault.
  Nothing,
  /// The store's fault.
  Failed(QuotaError),
}

/// What a settle or release came to on a driver: done, refused by the store (why), or the
/// store's fault.
pub type Settled = Result<std::result::Result<(), &'static str>>;

/// The counter store operations the engine needs, per request (`enforce`, `record`,
/// `settle`) and per store call (`consume`, `peek`, …). SQLite answers with [`Step::Now`]
/// on the calling thread; Redis with a future of one round trip, or at once from its
/// counter view. `engine` gives a driver the configuration, the SQLite connection (where
/// both drivers' metadata is) and the buffers it works with.
pub trait QuotaDriver: Send + Sync {
  /// `"sqlite"` or `"redis"`.
  fn name(&self) -> &'static str;

  /// The Redis URL, as given (password included); `None` for SQLite.
  fn url(&self) -> Option<&str>;

  /// Reads what `call`'s decision needs and applies the rules to it (`reserve`: reserve
  /// admission, which also reserves); the outcome, for the engine to count.
  fn enforce(
    &self,
    engine: &'static Engine,
    call: &EnforceCall,
    threshold: f64,
    reserve: bool,
  ) -> Step<Enforced>;

  /// Adds `call`'s cost to every matching counter; whether records were left buffered
  /// (the caller arranges a flush on its event loop).
  fn record(&self, engine: &'static Engine, call: &RecordCall) -> Step<(Written, Buffered)>;

  /// Settles or releases a reservation, at most once.
  fn settle(&self, engine: &'static Engine, settle: &Settle) -> Step<Settled>;

  /// `consume`: adds `cost` to the current bucket; the new effective value.
  fn consume(&self, engine: &'static Engine, at: CounterAt, cost: f64) -> Step<Result<f64>>;

  /// `peek`: the effective value, no write.
  fn peek(&self, engine: &'static Engine, at: CounterAt) -> Step<Result<f64>>;

  /// `poolConsumedTotal`: the sliding formula over the pool's summed buckets.
  fn pool_consumed_total(
    &self,
    engine: &'static Engine,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<f64>>;

  /// `clear`: zeroes the key's counter (curr and prev).
  fn clear(&self, engine: &'static Engine, at: CounterAt) -> Step<Result<()>>;

  /// `poolUsage` / `poolUsageWithDimensions`.
  fn pool_usage(
    &self,
    engine: &'static Engine,
    pool_id: String,
    dims: Vec<PlanDimension>,
    now_ms: i64,
  ) -> Step<Result<PoolUsageSnapshot>>;
}

/// One API key's counter of a dimension, at a time: what `consume`, `peek` and `clear` name.
pub struct CounterAt {
  pub api_key_id: String,
  pub key: DimensionKey,
  pub now_ms: i64,
}

/// Where one field of the choice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
  /// The host's `key_value` setting (`settings`/`quotaStore`).
  Setting,
  /// The environment variable.
  Environment,
  /// Neither: the default.
  Default,
}

impl Source {
  /// How `quota-engine doctor` names it.
  pub fn describe(self, variable: &str) -> String {
    match self {
      Source::Setting => "key_value settings/quotaStore".to_string(),
      Source::Environment => format!("env {variable}"),
      Source::Default => "default".to_string(),
    }
  }
}

/// What the host's setting and the environment ask for, field by field, and what is
/// wrong with them (docs/contract.md §4). The engine's choice and `quota-engine doctor`
/// both read this.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceReport {
  pub driver: (String, Source),
  pub redis_url: (String, Source),
  /// The driver that results before any connection is tried: `sqlite` or `redis`.
  pub effective: &'static str,
  pub problems: Vec<Problem>,
}

/// A driver chosen, and which choice it was (its sequence number).
#[derive(Debug, Clone, PartialEq)]
pub struct ChosenDriver {
  pub driver: &'static str,
  pub url: Option<String>,
  pub choice: u64,
}

impl ChosenDriver {
  pub fn new(driver: Driver, choice: u64) -> Self {
    ChosenDriver {
      driver: driver.name(),
      url: driver.url().map(str::to_string),
      choice,
    }
  }
}

/// What a Redis URL names: the URL (password masked), whether it is a Cluster, and the
/// bound on every operation (`QUOTA_STORE_REDIS_TIMEOUT_MS`).
#[derive(Debug, Clone, PartialEq)]
pub struct RedisTarget {
  pub url: String,
  pub cluster: bool,
  pub timeout_ms: f64,
}

/// One field of the choice as `quota-engine doctor` shows it, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceField {
  pub value: String,
  pub source: String,
}

/// A [`ChoiceReport`] as `quota-engine doctor` shows it, with the raw setting.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceDescription {
  pub driver: ChoiceField,
  pub redis_url: ChoiceField,
  pub effective: &'static str,
  pub problems: Vec<String>,
  pub setting: Option<String>,
}

/// What can be wrong with the choice's inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
  /// The setting is not JSON (the parse error), or not an object (`None`).
  Setting(Option<String>),
  /// `redis` without a URL.
  NoRedisUrl,
  /// A driver that is neither `sqlite` nor `redis`, and where it came from.
  UnknownDriver(String, Source),
}

impl Problem {
  /// As `quota-engine doctor` says it.
  pub fn describe(&self) -> String {
    match self {
      Problem::Setting(Some(_)) => {
        "the settings/quotaStore value is not valid JSON; it is ignored".into()
      }
      Problem::Setting(None) => {
        "the settings/quotaStore value is not a JSON object; it is ignored".into()
      }
      Problem::NoRedisUrl => "driver redis without a Redis URL; SQLite is used".into(),
      Problem::UnknownDriver(driver, source) => format!(
        "unknown driver {driver:?} (from {}); SQLite is used",
        source.describe(STORE_DRIVER)
      ),
    }
  }

  /// The warning the engine logs when it chooses.
  fn warn(&self, logs: &super::telemetry::LogQueue) {
    match self {
      Problem::Setting(error) => setting_unreadable(
        logs,
        error.clone().unwrap_or_else(|| "not a JSON object".into()),
      ),
      Problem::NoRedisUrl => logs.warn(
        "quota:factory",
        "QUOTA_STORE_DRIVER=redis without a Redis URL; falling back to SQLite",
        None,
      ),
      Problem::UnknownDriver(driver, _) => logs.warn(
        "quota:factory",
        format!("unknown quota store driver {driver:?}; using SQLite"),
        None,
      ),
    }
  }
}

/// The warning for a `quotaStore` setting that cannot be read, or is not a JSON object.
fn setting_unreadable(logs: &super::telemetry::LogQueue, error: String) {
  let msg = "could not read the quotaStore setting; using the environment";
  logs.push(
    "warn",
    "quota:factory",
    msg,
    vec![("error", LogValue::Text(error))],
  );
}

/// The choice's inputs: the raw setting (`None`: no row) and the environment.
pub fn choice_report(setting: Option<&str>, env: &dyn Fn(&str) -> Option<String>) -> ChoiceReport {
  let mut problems = Vec::new();
  let parsed = match setting.map(serde_json::from_str::<serde_json::Value>) {
    None => serde_json::Value::Null,
    Some(Ok(value @ serde_json::Value::Object(_))) => value,
    Some(Ok(_)) => {
      problems.push(Problem::Setting(None));
      serde_json::Value::Null
    }
    Some(Err(err)) => {
      problems.push(Problem::Setting(Some(err.to_string())));
      serde_json::Value::Null
    }
  };
  // Field by field: a non-empty string in the setting, else the environment, else the default.
  let pick = |field: &str, variable: &str, fallback: &str| match parsed
    .get(field)
    .and_then(|v| v.as_str())
    .filter(|v| !v.is_empty())
  {
    Some(value) => (value.to_string(), Source::Setting),
    None => match env(variable) {
      Some(value) => (value, Source::Environment),
      None => (fallback.to_string(), Source::Default),
    },
  };
  let driver = pick("driver", STORE_DRIVER, "sqlite");
  let redis_url = pick("redisUrl", STORE_REDIS_URL, "");
  let effective = match driver.0.as_str() {
    "redis" if redis_url.0.is_empty() => {
      problems.push(Problem::NoRedisUrl);
      "sqlite"
    }
    "redis" => "redis",
    "sqlite" => "sqlite",
    other => {
      problems.push(Problem::UnknownDriver(other.to_string(), driver.1));
      "sqlite"
    }
  };
  ChoiceReport {
    driver,
    redis_url,
    effective,
    problems,
  }
}

/// How often the hot path looks whether the host's setting changed.
const SETTING_CHECK: Duration = Duration::from_secs(1);

struct Chosen {
  driver: Driver,
  /// The raw setting the choice was made with.
  setting: Option<String>,
}

/// A choice waiting for Redis to answer a PING, shared by every caller that needs it: the
/// first to poll it pings, the others wait for that answer.
#[derive(Clone)]
struct Pending {
  sequence: u64,
  setting: Option<String>,
  url: String,
  backend: Arc<RedisBackend>,
  done: Arc<tokio::sync::OnceCell<Driver>>,
}

#[derive(Default)]
struct ChoiceState {
  chosen: Option<Chosen>,
  pending: Option<Pending>,
  /// Bumped by every choice started and every reset: only the latest choice settles.
  sequence: u64,
  checked_at: Option<Instant>,
  /// `getQuotaStore()` has resolved since the last reset (`getQuotaStoreSync()` throws
  /// before).
  announced: bool,
  /// The last error reading the host's setting (warned about once).
  read_error: Option<String>,
}

impl ChoiceState {
  /// `driver`, chosen with `setting`, is the choice now.
  fn settle(&mut self, driver: Driver, setting: Option<String>) {
    self.pending = None;
    self.chosen = Some(Chosen { driver, setting });
    self.checked_at = Some(Instant::now());
  }
}

/// The process's choice, the drivers JS holds by number, and the Redis backends.
pub struct DriverChoice {
  state: Mutex<ChoiceState>,
  /// The SQLite driver (stateless: the connection is the engine's, see `engine/database.rs`).
  sqlite: Driver,
  /// The Redis drivers numbered so far, one per URL: driver `i` is number `i + 1` (`0` is
  /// SQLite).
  numbered: Mutex<Vec<Driver>>,
  /// The Redis backends (connection, counter view), one per URL: the drivers, the
  /// ioredis-like client and the write-behind flushes look theirs up here by URL.
  backends: Backends,
}

impl Default for DriverChoice {
  fn default() -> Self {
    DriverChoice {
      state: Mutex::default(),
      sqlite: Arc::new(SqliteDriver),
      numbered: Mutex::default(),
      backends: Backends::default(),
    }
  }
}

impl DriverChoice {
  fn lock(&self) -> std::sync::MutexGuard<'_, ChoiceState> {
    super::relock(&self.state)
  }
}

impl Engine {
  /// The number JS holds for a driver (docs/architecture.md#the-edge-srcbinding): `0`
  /// SQLite (no `url`); each Redis URL its own, kept for the process. The URL is checked
  /// first: a `RangeError` naming `url`, its password masked, for one the engine cannot
  /// use (nothing connects yet).
  pub fn driver_number(&self, url: Option<&str>) -> Result<u32> {
    let Some(url) = url else {
      return Ok(0);
    };
    self.redis_backend(url)?;
    let mut drivers = super::relock(&self.drivers.numbered);
    let at = match drivers.iter().position(|known| known.url() == Some(url)) {
      Some(at) => at,
      None => {
        drivers.push(Arc::new(RedisDriver::new(url.to_string())));
        drivers.len() - 1
      }
    };
    Ok(at as u32 + 1)
  }

  /// The driver numbered `number` by [`Engine::driver_number`].
  pub fn numbered_driver(&self, number: i64) -> Result<Driver> {
    if number == 0 {
      return Ok(self.drivers.sqlite.clone());
    }
    let drivers = super::relock(&self.drivers.numbered);
    usize::try_from(number - 1)
      .ok()
      .and_then(|at| drivers.get(at))
      .cloned()
      .ok_or_else(|| {
        QuotaError::range_error("driver", format!("no store driver is numbered {number}"))
      })
  }

  /// The Redis backend of `url` (one per URL; the timeout, cluster switch, TLS files and
  /// pool-totals mode are read from the configuration when it is created, each bad value
  /// warned about once). A URL the engine cannot use is a `RangeError` naming `url`, its
  /// password masked.
  pub fn redis_backend(&self, url: &str) -> Result<Arc<RedisBackend>> {
    self.drivers.backends.get(url, || {
      let totals = self.warned(self.config.pool_totals());
      let tls = self.warned(self.config.redis_tls_files());
      RedisOptions {
        cluster: config::cluster_switch(self.config.raw(config::STORE_REDIS_CLUSTER).as_deref()),
        timeout: Duration::from_millis(self.number(&config::REDIS_TIMEOUT_MS).round() as u64),
        tls,
        totals,
      }
    })
  }

  /// `resetRedisClient()`: forgets the backend of `url` (of every URL with `None`); the
  /// next use connects anew.
  pub fn forget_redis(&self, url: Option<&str>) {
    self.drivers.backends.forget(url);
  }

  /// `getQuotaStore()` resolved with choice `sequence`: announced, unless a reset or a
  /// newer choice came since.
  pub fn announce_driver(&self, sequence: u64) {
    let mut state = self.drivers.lock();
    if state.sequence == sequence {
      state.announced = true;
    }
  }

  /// Forgets the choice (`resetQuotaStoreSingleton()`): the next use chooses again.
  pub fn forget_driver(&self) {
    let mut state = self.drivers.lock();
    state.chosen = None;
    state.pending = None;
    state.announced = false;
    state.sequence += 1;
  }

  /// The host's raw `quotaStore` setting, or `Err` when it cannot be read — warned about
  /// once per distinct error.
  fn read_store_setting(&'static self) -> std::result::Result<Option<String>, ()> {
    match self.with_hot_db(|db| db.read_setting("settings", "quotaStore")) {
      Ok(raw) => {
        self.drivers.lock().read_error = None;
        Ok(raw)
      }
      Err(err) => {
        let error = err.to_string();
        let first = {
          let mut state = self.drivers.lock();
          let first = state.read_error.as_deref() != Some(error.as_str());
          state.read_error = Some(error.clone());
          first
        };
        if first {
          setting_unreadable(&self.logs, error);
        }
        Err(())
      }
    }
  }

  /// Settles choice `sequence` — unless a later choice or a reset came since.
  fn settle_choice(&self, sequence: u64, driver: Driver, setting: Option<String>) -> Driver {
    let mut state = self.drivers.lock();
    if state.sequence == sequence {
      state.settle(driver.clone(), setting);
    }
    driver
  }

  /// `getQuotaStore()`'s choice: the chosen driver while the host's setting is the one it
  /// was chosen with, else a new choice — at once for SQLite, after one PING for Redis,
  /// which every caller that needs the choice meanwhile shares — with the number of the
  /// choice it settled (for [`Engine::announce_driver`]).
  pub fn choose_numbered(&'static self) -> Step<(Driver, u64)> {
    // A setting that cannot be read counts as none: the environment decides.
    let setting = self.read_store_setting().unwrap_or(None);
    self.choose_with(setting)
  }

  /// The choice for `setting`: the one made or in flight for it, else a new one. The
  /// new choice starts in the same critical section that checks for one, so a reset on
  /// another thread can never leave a stale choice behind.
  fn choose_with(&'static self, setting: Option<String>) -> Step<(Driver, u64)> {
    if let Some(found) = self.existing_choice(&self.drivers.lock(), &setting) {
      return found;
    }
    // What the inputs ask for, worked out outside the lock (it logs, makes a backend).
    let report = choice_report(setting.as_deref(), &|name| self.config.raw(name));
    for problem in &report.problems {
      problem.warn(&self.logs);
    }
    let redis = match report.effective {
      "redis" => {
        let url = report.redis_url.0;
        match self.redis_backend(&url) {
          Ok(backend) => Some((url, backend)),
          Err(err) => {
            self.redis_unavailable(&url, &err);
            None
          }
        }
      }
      _ => None,
    };
    let mut state = self.drivers.lock();
    if let Some(found) = self.existing_choice(&state, &setting) {
      return found;
    }
    state.sequence += 1;
    let sequence = state.sequence;
    match redis {
      None => {
        let sqlite = self.drivers.sqlite.clone();
        state.settle(sqlite.clone(), setting);
        Step::Now((sqlite, sequence))
      }
      Some((url, backend)) => {
        let pending = Pending {
          sequence,
          setting,
          url,
          backend,
          done: Arc::new(tokio::sync::OnceCell::new()),
        };
        state.pending = Some(pending.clone());
        drop(state);
        self
          .await_choice(pending)
          .map(move |driver| (driver, sequence))
      }
    }
  }

  /// The choice already made, or in flight, for `setting`.
  fn existing_choice(
    &'static self,
    state: &ChoiceState,
    setting: &Option<String>,
  ) -> Option<Step<(Driver, u64)>> {
    if let Some(chosen) = state.chosen.as_ref().filter(|c| &c.setting == setting) {
      return Some(Step::Now((chosen.driver.clone(), state.sequence)));
    }
    state
      .pending
      .as_ref()
      .filter(|p| &p.setting == setting)
      .map(|pending| {
        let sequence = pending.sequence;
        self
          .await_choice(pending.clone())
          .map(move |driver| (driver, sequence))
      })
  }

  /// The driver a pending choice settles on: Redis when it answers a PING within the
  /// timeout, else SQLite with a warning. Pinged once, however many wait.
  fn await_choice(&'static self, pending: Pending) -> Step<Driver> {
    Step::later(async move {
      let Pending {
        sequence,
        setting,
        url,
        backend,
        done,
      } = pending;
      done
        .get_or_init(|| async move {
          let driver = match backend.command(&["PING".to_string()], Retry::Read).await {
            Ok(_) => {
              self.logs.push(
                "info",
                "quota:factory",
                format!("quota counters on Redis at {}", mask_url(&url)),
                Vec::new(),
              );
              Arc::new(RedisDriver::new(url)) as Driver
            }
            Err(err) => {
              self.redis_unavailable(&url, &err);
              self.drivers.sqlite.clone()
            }
          };
          self.settle_choice(sequence, driver, setting)
        })
        .await
        .clone()
    })
  }

  fn redis_unavailable(&self, url: &str, err: &crate::error::QuotaError) {
    let error = err.to_string();
    let why = crate::store::redis::tls::explain(&error)
      .map(|fix| format!(": {fix}"))
      .unwrap_or_default();
    self.logs.push(
      "warn",
      "quota:factory",
      format!(
        "Redis quota store unavailable at {}; falling back to SQLite{why}",
        mask_url(url)
      ),
      vec![
        ("error", LogValue::Text(error)),
        ("code", LogValue::Text(err.code().to_string())),
      ],
    );
  }

  /// The driver for a hot-path call: the chosen one. The host's setting is looked at again
  /// at most once a second; when it changed, the new choice is started and, while Redis is
  /// pinged, calls keep the driver they had (`spawn` runs the choice). With no driver yet,
  /// the choice to await first.
  pub fn driver_for_call(
    &'static self,
    spawn: &dyn Fn(Step<Driver>),
  ) -> std::result::Result<Driver, Step<Driver>> {
    let current = {
      let mut state = self.drivers.lock();
      match &state.chosen {
        Some(chosen)
          if state
            .checked_at
            .is_some_and(|t| t.elapsed() < SETTING_CHECK) =>
        {
          return Ok(chosen.driver.clone());
        }
        Some(chosen) => {
          let current = (chosen.driver.clone(), chosen.setting.clone());
          state.checked_at = Some(Instant::now());
          Some(current)
        }
        None => None,
      }
    };
    let Some((driver, chosen_with)) = current else {
      return match self.choose_numbered().map(|(driver, _)| driver) {
        Step::Now(driver) => Ok(driver),
        later => Err(later),
      };
    };
    match self.read_store_setting() {
      // Unreadable, or unchanged: the driver stays (a replica must not split off its fleet
      // because one read failed).
      Err(()) => Ok(driver),
      Ok(setting) if setting == chosen_with => Ok(driver),
      Ok(setting) => match self.choose_with(setting) {
        Step::Now((driver, _)) => Ok(driver),
        later => {
          spawn(later.map(|(driver, _)| driver));
          Ok(driver)
        }
      },
    }
  }

  /// A description of a Redis URL without connecting: the masked URL, whether it is a
  /// cluster, and its timeout.
  pub fn redis_target(&self, url: &str) -> Result<RedisTarget> {
    let backend = self.redis_backend(url)?;
    Ok(RedisTarget {
      url: backend.display().to_string(),
      cluster: backend.layout() == KeyLayout::Cluster,
      timeout_ms: backend.timeout().as_millis() as f64,
    })
  }

  /// The driver choice the raw `setting` and the environment make, before any connection
  /// is tried, as `quota-engine doctor` shows it.
  pub fn describe_store_choice(&self, setting: Option<String>) -> ChoiceDescription {
    let report = choice_report(setting.as_deref(), &|name| self.config.raw(name));
    let field = |(value, source): (String, Source), variable: &str| ChoiceField {
      value,
      source: source.describe(variable),
    };
    ChoiceDescription {
      driver: field(report.driver, STORE_DRIVER),
      redis_url: field(report.redis_url, STORE_REDIS_URL),
      effective: report.effective,
      problems: report.problems.iter().map(Problem::describe).collect(),
      setting,
    }
  }

  /// The driver `getQuotaStore()` chose, or `None` before it resolved (since the last
  /// reset), with the choice's sequence number.
  pub fn chosen_now(&self) -> Option<ChosenDriver> {
    let state = self.drivers.lock();
    let chosen = state.chosen.as_ref().filter(|_| state.announced)?;
    Some(ChosenDriver::new(chosen.driver.clone(), state.sequence))
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  fn env(name: &str) -> Option<String> {
    match name {
      "QUOTA_STORE_DRIVER" => Some("redis".into()),
      "QUOTA_STORE_REDIS_URL" => Some("redis://env:6379".into()),
      _ => None,
    }
  }

  #[test]
  fn the_setting_wins_field_by_field_over_the_environment() {
    let r = choice_report(Some(r#"{"driver":"sqlite"}"#), &env);
    assert_eq!(r.driver, ("sqlite".into(), Source::Setting));
    assert_eq!(
      r.redis_url,
      ("redis://env:6379".into(), Source::Environment)
    );
    assert_eq!((r.effective, r.problems.len()), ("sqlite", 0));
    // A field of the wrong type is ignored alone, not the whole setting.
    let r = choice_report(Some(r#"{"driver":"sqlite","redisUrl":7}"#), &env);
    assert_eq!(r.effective, "sqlite");
    let r = choice_report(None, &env);
    assert_eq!(
      (r.effective, r.redis_url.0.as_str()),
      ("redis", "redis://env:6379")
    );
    let r = choice_report(None, &|_| None);
    assert_eq!(r.driver, ("sqlite".into(), Source::Default));
  }

  #[test]
  fn problems_are_named() {
    let r = choice_report(Some("{oops"), &|_| None);
    assert!(matches!(r.problems[0], Problem::Setting(Some(_))));
    assert_eq!(
      choice_report(Some("[1]"), &|_| None).problems,
      [Problem::Setting(None)]
    );
    let r = choice_report(Some(r#"{"driver":"redis"}"#), &|_| None);
    assert_eq!(
      (r.effective, &r.problems[..]),
      ("sqlite", &[Problem::NoRedisUrl][..])
    );
    let r = choice_report(Some(r#"{"driver":"mongo"}"#), &|_| None);
    assert_eq!(
      r.problems[0].describe(),
      "unknown driver \"mongo\" (from key_value settings/quotaStore); SQLite is used"
    );
  }
}
