//! The storage driver (docs/contract.md §4): an enum over SQLite and Redis, chosen once
//! for the process by precedence — the host's DB setting (`key_value`, namespace
//! `settings`, key `quotaStore`, JSON `{ driver?, redisUrl? }`), then the environment
//! (`QUOTA_STORE_DRIVER`, `QUOTA_STORE_REDIS_URL`), then SQLite — and chosen again when the
//! host's setting changes. Redis that does not answer a PING within the timeout falls
//! back to SQLite with a warning; choosing never fails.
//!
//! The counter operations dispatch here, once, on the enum: SQLite answers at once on
//! the calling thread ([`Step::Now`]), Redis with a future of one round trip.

use super::config::{self, STORE_DRIVER, STORE_REDIS_URL};
use super::logs::LogValue;
use super::{Engine, Step};
use crate::core::dimensions::DimensionKey;
use crate::error::Result;
use crate::store::redis::keys::base_pool_id;
use crate::store::redis::{counters, mask_url, KeyLayout, RedisBackend, Retry};
use crate::store::{CounterStore, PlanDimension, PoolUsageSnapshot};
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The store holding the counters.
#[derive(Clone)]
pub enum Driver {
  /// The host's `storage.sqlite` (the default).
  Sqlite,
  /// Counters on Redis, shared by every replica; metadata stays in SQLite.
  Redis(Arc<RedisBackend>),
}

impl Driver {
  /// `"sqlite"` or `"redis"`.
  pub fn name(&self) -> &'static str {
    match self {
      Driver::Sqlite => "sqlite",
      Driver::Redis(_) => "redis",
    }
  }

  /// The Redis URL the backend was created for (password included, as given).
  pub fn url(&self) -> Option<&str> {
    match self {
      Driver::Sqlite => None,
      Driver::Redis(backend) => Some(backend.url()),
    }
  }
}

/// The host's `quotaStore` setting.
#[derive(Debug, Default, Deserialize)]
struct StoreSetting {
  driver: Option<String>,
  #[serde(rename = "redisUrl")]
  redis_url: Option<String>,
}

/// How often the hot path looks whether the host's setting changed.
const SETTING_CHECK: Duration = Duration::from_secs(1);

struct Chosen {
  driver: Driver,
  /// The raw setting the choice was made with.
  setting: Option<String>,
}

#[derive(Default)]
struct ChoiceState {
  chosen: Option<Chosen>,
  /// Bumped by every reset, so a choice that finishes after one is discarded.
  generation: u64,
  checked_at: Option<Instant>,
}

/// The process's choice.
#[derive(Default)]
pub struct DriverChoice {
  state: Mutex<ChoiceState>,
}

impl DriverChoice {
  fn lock(&self) -> std::sync::MutexGuard<'_, ChoiceState> {
    self.state.lock().unwrap_or_else(|e| e.into_inner())
  }
}

/// What the inputs of a choice ask for.
enum Wanted {
  Sqlite,
  Redis(String),
}

impl Engine {
  /// The Redis backend of `url` (one per URL; the timeout and cluster switch are read
  /// from the configuration when it is created). A URL the engine cannot use is a
  /// `RangeError` naming `url`, its password masked.
  pub fn redis_backend(&self, url: &str) -> Result<Arc<RedisBackend>> {
    let cluster = config::cluster_switch(self.config.raw(config::STORE_REDIS_CLUSTER).as_deref());
    let timeout = Duration::from_millis(self.number(&config::REDIS_TIMEOUT_MS).round() as u64);
    crate::store::redis::backend(url, cluster, timeout)
  }

  /// The driver chosen, if one is.
  pub fn chosen_driver(&self) -> Option<Driver> {
    self
      .drivers
      .lock()
      .chosen
      .as_ref()
      .map(|c| c.driver.clone())
  }

  /// Forgets the choice (`resetQuotaStoreSingleton()`): the next use chooses again.
  pub fn forget_driver(&self) {
    let mut state = self.drivers.lock();
    state.chosen = None;
    state.generation += 1;
  }

  /// The host's raw `quotaStore` setting; a failure to read it is warned about and
  /// counts as no setting.
  fn read_store_setting(&'static self) -> Option<String> {
    match self.with_hot_db(|db| db.read_setting("settings", "quotaStore")) {
      Ok(raw) => raw,
      Err(err) => {
        self.logs.warn(
          "quota:factory",
          "could not read the quotaStore setting; using the environment",
          Some(err.to_string()),
        );
        None
      }
    }
  }

  fn wanted(&self, setting: Option<&str>) -> Wanted {
    let parsed: StoreSetting = setting
      .and_then(|raw| serde_json::from_str(raw).ok())
      .unwrap_or_default();
    let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
    let driver = non_empty(parsed.driver)
      .or_else(|| self.config.raw(STORE_DRIVER))
      .unwrap_or_else(|| "sqlite".into());
    let url = non_empty(parsed.redis_url)
      .or_else(|| self.config.raw(STORE_REDIS_URL))
      .unwrap_or_default();
    match driver.as_str() {
      "redis" if url.is_empty() => {
        self.logs.warn(
          "quota:factory",
          "QUOTA_STORE_DRIVER=redis without a Redis URL; falling back to SQLite",
          None,
        );
        Wanted::Sqlite
      }
      "redis" => Wanted::Redis(url),
      "sqlite" => Wanted::Sqlite,
      other => {
        self.logs.warn(
          "quota:factory",
          format!("unknown quota store driver {other:?}; using SQLite"),
          None,
        );
        Wanted::Sqlite
      }
    }
  }

  fn settle_choice(&self, generation: u64, driver: Driver, setting: Option<String>) -> Driver {
    let mut state = self.drivers.lock();
    if state.generation == generation {
      state.chosen = Some(Chosen {
        driver: driver.clone(),
        setting,
      });
      state.checked_at = Some(Instant::now());
    }
    driver
  }

  /// `getQuotaStore()`'s choice: the chosen driver while the host's setting is the one it
  /// was chosen with, else a new choice — at once for SQLite, after a PING for Redis.
  pub fn choose_driver(&'static self) -> Step<Driver> {
    let setting = self.read_store_setting();
    let generation = {
      let state = self.drivers.lock();
      if let Some(chosen) = state.chosen.as_ref().filter(|c| c.setting == setting) {
        return Step::Now(chosen.driver.clone());
      }
      state.generation
    };
    let url = match self.wanted(setting.as_deref()) {
      Wanted::Sqlite => return Step::Now(self.settle_choice(generation, Driver::Sqlite, setting)),
      Wanted::Redis(url) => url,
    };
    let backend = match self.redis_backend(&url) {
      Ok(backend) => backend,
      Err(err) => {
        self.redis_unavailable(&url, &err);
        return Step::Now(self.settle_choice(generation, Driver::Sqlite, setting));
      }
    };
    Step::later(async move {
      match backend.command(&["PING".to_string()], Retry::Read).await {
        Ok(_) => {
          self.logs.push(
            "info",
            "quota:factory",
            format!("quota counters on Redis at {}", mask_url(&url)),
            Vec::new(),
          );
          self.settle_choice(generation, Driver::Redis(backend), setting)
        }
        Err(err) => {
          self.redis_unavailable(&url, &err);
          self.settle_choice(generation, Driver::Sqlite, setting)
        }
      }
    })
  }

  fn redis_unavailable(&self, url: &str, err: &crate::error::QuotaError) {
    self.logs.push(
      "warn",
      "quota:factory",
      format!(
        "Redis quota store unavailable at {}; falling back to SQLite",
        mask_url(url)
      ),
      vec![
        ("error", LogValue::Text(err.to_string())),
        ("code", LogValue::Text(err.code().to_string())),
      ],
    );
  }

  /// The driver for a hot-path call: the chosen one (the host's setting is looked at
  /// again at most once a second), or — while none is — the choice to await first.
  pub fn driver_for_call(&'static self) -> std::result::Result<Driver, Step<()>> {
    let recheck = {
      let state = self.drivers.lock();
      match &state.chosen {
        Some(chosen)
          if state
            .checked_at
            .is_some_and(|t| t.elapsed() < SETTING_CHECK) =>
        {
          return Ok(chosen.driver.clone());
        }
        Some(_) => true,
        None => false,
      }
    };
    if recheck {
      let setting = self.read_store_setting();
      let mut state = self.drivers.lock();
      state.checked_at = Some(Instant::now());
      match &state.chosen {
        Some(chosen) if chosen.setting == setting => return Ok(chosen.driver.clone()),
        _ => state.chosen = None,
      }
    }
    match self.choose_driver() {
      Step::Now(driver) => Ok(driver),
      Step::Later(choosing) => Err(Step::later(async move {
        choosing.await;
      })),
    }
  }

  /// A description of a Redis URL without connecting: the masked URL, whether it is a
  /// cluster, and its timeout.
  pub fn redis_target(&self, url: &str) -> Result<(String, bool, Duration)> {
    let backend = self.redis_backend(url)?;
    Ok((
      backend.display().to_string(),
      backend.layout() == KeyLayout::Cluster,
      backend.timeout(),
    ))
  }

  /// The API keys of the pool a dimension key belongs to (`"<pool>:model:<m>"` belongs
  /// to `<pool>`), from SQLite's metadata cache.
  fn pool_key_ids(&'static self, pool_id: &str) -> Result<Vec<String>> {
    Ok(
      self
        .with_db(|db| db.cached_pool(base_pool_id(pool_id)))?
        .map(|pool| {
          pool
            .allocations
            .iter()
            .map(|a| a.api_key_id.clone())
            .collect()
        })
        .unwrap_or_default(),
    )
  }

  /// `consume`: adds `cost` to the current bucket; the new effective value.
  pub fn consume(
    &'static self,
    driver: &Driver,
    api_key_id: String,
    key: DimensionKey,
    cost: f64,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    match driver {
      Driver::Sqlite => Step::Now(self.with_db(|db| db.consume(&api_key_id, &key, cost, now_ms))),
      Driver::Redis(backend) => later(counters::consume(
        backend.clone(),
        api_key_id,
        key,
        cost,
        now_ms,
      )),
    }
  }

  /// `peek`: the effective value, no write.
  pub fn peek(
    &'static self,
    driver: &Driver,
    api_key_id: String,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    match driver {
      Driver::Sqlite => {
        Step::Now(self.with_hot_db(|db| db.hot_scope(|db| db.peek(&api_key_id, &key, now_ms))))
      }
      Driver::Redis(backend) => later(counters::peek(backend.clone(), api_key_id, key, now_ms)),
    }
  }

  /// `poolConsumedTotal`: the sliding formula over the pool's summed buckets.
  pub fn pool_consumed_total(
    &'static self,
    driver: &Driver,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    match driver {
      Driver::Sqlite => {
        Step::Now(self.with_hot_db(|db| db.hot_scope(|db| db.pool_consumed_total(&key, now_ms))))
      }
      Driver::Redis(backend) => {
        let ids = match crate::store::validate::non_empty(&key.pool_id, "dim.poolId")
          .and_then(|()| self.pool_key_ids(&key.pool_id))
        {
          Ok(ids) => ids,
          Err(err) => return Step::Now(Err(err)),
        };
        later(counters::pool_consumed_total(
          backend.clone(),
          key,
          ids,
          now_ms,
        ))
      }
    }
  }

  /// `clear`: zeroes the key's counter (curr and prev).
  pub fn clear(
    &'static self,
    driver: &Driver,
    api_key_id: String,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<()>> {
    match driver {
      Driver::Sqlite => Step::Now(self.with_db(|db| db.clear(&api_key_id, &key))),
      Driver::Redis(backend) => later(counters::clear(backend.clone(), api_key_id, key, now_ms)),
    }
  }

  /// `poolUsage` / `poolUsageWithDimensions`.
  pub fn pool_usage(
    &'static self,
    driver: &Driver,
    pool_id: String,
    dims: Vec<PlanDimension>,
    now_ms: i64,
  ) -> Step<Result<PoolUsageSnapshot>> {
    match driver {
      Driver::Sqlite => {
        Step::Now(self.with_db(|db| db.pool_usage_with_dimensions(&pool_id, &dims, now_ms)))
      }
      Driver::Redis(backend) => {
        let allocations = match self.with_db(|db| db.cached_pool(&pool_id)) {
          Ok(pool) => pool.map(|p| p.allocations.clone()),
          Err(err) => return Step::Now(Err(err)),
        };
        Step::later(counters::pool_usage(
          backend.clone(),
          pool_id,
          allocations,
          dims,
          now_ms,
        ))
      }
    }
  }
}

/// A Redis operation: its validation error now, or its future.
fn later<T: Send + 'static>(
  prepared: Result<impl std::future::Future<Output = Result<T>> + Send + 'static>,
) -> Step<Result<T>> {
  match prepared {
    Ok(future) => Step::later(future),
    Err(err) => Step::Now(Err(err)),
  }
}
