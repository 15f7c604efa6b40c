//! The one engine of the process (docs/architecture.md): it owns the chosen storage
//! driver, every setting, the saturation cache and fetcher registry, the scheduler state,
//! the metrics and fault counters and the log queue. The napi edge holds one static
//! instance, so every JS thread of the process — main and workers — reaches the same
//! engine and the same configuration. Nothing here knows about napi.
//!
//! - `config.rs`: every `QUOTA_*` variable, parsed and validated in one place.
//! - `driver.rs`: the `QuotaDriver` trait the engine calls the counter store through, how
//!   it is chosen, the store calls' entry points; its SQLite implementation is in
//!   `database.rs` (with the one connection: opened lazily, replaced when its file is,
//!   swept in the background), its Redis one in `redis_driver.rs`, with `redis_writes.rs`
//!   (the write-behind) and `redis_view.rs` (deciding from the counter view).
//! - `hot_path.rs`: `enforceQuotaShare`, `recordConsumption` and reservations, one call
//!   each; `input.rs`: the host's arguments, read with the path of every value.
//! - `saturation.rs`, `scheduler.rs`, `telemetry.rs` (logs, faults, metrics): each
//!   concept's state; `test_hooks.rs`: the test-only exports (`test-hooks` feature).

pub mod config;
pub mod database;
pub mod driver;
pub mod hot_path;
pub mod input;
pub mod redis_driver;
pub mod redis_view;
pub mod redis_writes;
pub mod saturation;
pub mod scheduler;
pub mod telemetry;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;

use crate::core::dimensions::ProviderPlan;
use crate::core::plans::resolve_plan;
use crate::error::Result;
use crate::store::sqlite::SqliteDb;
use database::Access;
use hot_path::EnforceCall;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// A result now, or a future of it to run on the I/O runtime (Redis).
pub enum Step<T> {
  Now(T),
  Later(Pin<Box<dyn Future<Output = T> + Send + 'static>>),
}

impl<T: Send + 'static> Step<T> {
  /// The same step with `f` applied to its value.
  pub fn map<U: Send + 'static>(self, f: impl FnOnce(T) -> U + Send + 'static) -> Step<U> {
    match self {
      Step::Now(value) => Step::Now(f(value)),
      Step::Later(future) => Step::Later(Box::pin(async move { f(future.await) })),
    }
  }

  /// The value: at once, or when the future is done.
  pub async fn resolve(self) -> T {
    match self {
      Step::Now(value) => value,
      Step::Later(future) => future.await,
    }
  }

  /// A future of the value, whichever it is.
  pub fn later(future: impl Future<Output = T> + Send + 'static) -> Self {
    Step::Later(Box::pin(future))
  }
}

/// The process's engine.
pub struct Engine {
  pub config: config::Config,
  pub logs: telemetry::LogQueue,
  pub metrics: telemetry::Metrics,
  pub faults: telemetry::Faults,
  pub database: database::Database,
  pub drivers: driver::DriverChoice,
  /// `recordConsumption`'s write-behind buffers on Redis.
  pub redis_writes: redis_writes::RedisWrites,
  saturation: Mutex<saturation::SaturationState>,
  scheduler: Mutex<scheduler::SchedulerState>,
  started: Instant,
  sweeper_interval: std::time::Duration,
  /// Runs a future in the background (the edge sets it to its I/O runtime): a new driver
  /// choice while calls keep the driver they had.
  pub spawner: std::sync::OnceLock<Spawner>,
}

/// Runs a future to completion in the background.
pub type Spawner = Box<dyn Fn(Pin<Box<dyn Future<Output = ()> + Send + 'static>>) + Send + Sync>;

impl Default for Engine {
  fn default() -> Self {
    Engine {
      config: config::Config::default(),
      logs: telemetry::LogQueue::default(),
      metrics: telemetry::Metrics::default(),
      faults: telemetry::Faults::default(),
      database: database::Database::default(),
      drivers: driver::DriverChoice::default(),
      redis_writes: redis_writes::RedisWrites::default(),
      saturation: Mutex::default(),
      scheduler: Mutex::default(),
      started: Instant::now(),
      sweeper_interval: std::time::Duration::from_secs(3600),
      spawner: std::sync::OnceLock::new(),
    }
  }
}

/// The clock: epoch milliseconds.
pub fn now_ms() -> i64 {
  std::time::SystemTime::now()
    .duration_since(std::time::UNIX_EPOCH)
    .map_or(0, |d| d.as_millis() as i64)
}

/// The request time: `nowMs` when given and finite (tests), else the clock.
pub fn clock(now_ms: Option<f64>) -> i64 {
  now_ms
    .filter(|t| t.is_finite())
    .map_or_else(self::now_ms, |t| t as i64)
}

fn relock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
  // The state is plain data, consistent between calls: a panic elsewhere does not spoil it.
  mutex
    .lock()
    .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Engine {
  /// The saturation state.
  pub fn saturation(&self) -> MutexGuard<'_, saturation::SaturationState> {
    relock(&self.saturation)
  }

  /// The scheduler state.
  pub fn scheduler(&self) -> MutexGuard<'_, scheduler::SchedulerState> {
    relock(&self.scheduler)
  }

  /// Runs `step` in the background when it is a future (without a spawner: not at all).
  pub fn in_background<T: Send + 'static>(&self, step: Step<T>) {
    if let (Step::Later(future), Some(spawn)) = (step, self.spawner.get()) {
      spawn(Box::pin(async move {
        future.await;
      }));
    }
  }

  /// Milliseconds on a monotonic clock since the engine started (for latencies).
  pub fn monotonic_ms(&self) -> f64 {
    self.started.elapsed().as_secs_f64() * 1000.0
  }

  /// A numeric setting, warning once per bad value.
  pub fn number(&self, spec: &config::NumberSpec) -> f64 {
    self.warned(self.config.number(spec))
  }

  /// `QUOTA_ADMISSION`, warning once per bad value.
  pub fn admission(&self) -> config::AdmissionMode {
    self.warned(self.config.admission())
  }

  /// A setting's value, its warning (if any) logged.
  fn warned<T>(&self, (value, warning): (T, Option<String>)) -> T {
    if let Some(warning) = warning {
      self.logs.warn("quota:config", warning, None);
    }
    value
  }

  /// `resolvePlan` (docs/contract.md §6), which never fails: the stored plan when it has
  /// dimensions, else the catalog's, else an empty manual plan.
  pub fn resolve_plan(&'static self, connection_id: &str, provider: &str) -> ProviderPlan {
    let stored = self.with_db(|db| db.get_provider_plan(connection_id));
    // A failing lookup counts as no stored plan.
    resolve_plan(stored.ok().flatten(), provider)
  }

  /// `closeQuotaDb()`: closes the engine's connection (prepared statements and cached
  /// rows go with it), committing the buffered records first — Redis's write-behind
  /// buffer too (a failure keeps it, logged as a fault). What cannot be committed is
  /// dropped with a warning.
  pub fn close_db(&'static self) -> Result<()> {
    // At exit the exit hook has just waited for Redis once: a stalled server would make the
    // close wait as long again.
    if !self.database.exiting.load(Ordering::Acquire) {
      let _ = self.flush_redis_blocking();
    }
    if let Some(dropped) = self.database.close()? {
      self.logs.warn(
        "quota:store",
        format!(
          "closing the database dropped {} buffered quota counters that could not be committed",
          dropped.counters
        ),
        Some(dropped.error),
      );
    }
    Ok(())
  }

  /// Runs `f` on the engine's SQLite connection, opening it when needed; buffered
  /// records are committed first.
  pub fn with_db<T>(&'static self, f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Result<T> {
    self.run_db(Access::Full, f)
  }

  /// [`Engine::with_db`] for the hot path, which reads buffered records itself.
  pub fn with_hot_db<T>(&'static self, f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Result<T> {
    self.run_db(Access::Hot, f)
  }

  /// [`Engine::with_hot_db`] for a decision: without the file check when its crossing has
  /// just made it ([`EnforceCall::file_checked`]).
  pub fn with_decision_db<T>(
    &'static self,
    call: &EnforceCall,
    f: impl FnOnce(&mut SqliteDb) -> Result<T>,
  ) -> Result<T> {
    let access = if call.file_checked {
      Access::Checked
    } else {
      Access::Hot
    };
    self.run_db(access, f)
  }

  /// [`Engine::with_hot_db`] for a record that only adds to the buffer (no file check).
  pub fn with_buffer_db<T>(&'static self, f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Result<T> {
    self.run_db(Access::Buffer, f)
  }

  fn run_db<T>(
    &'static self,
    access: Access,
    f: impl FnOnce(&mut SqliteDb) -> Result<T>,
  ) -> Result<T> {
    let (result, opened) = self.database.run(access, f);
    self.report_file_changes();
    if opened {
      self.after_open();
    }
    result
  }

  /// How many days of counter rows the retention sweep keeps: `given` (a `gcConsumption`
  /// argument), else `QUOTA_CONSUMPTION_RETENTION_DAYS`.
  pub fn retention_days(&self, given: Option<f64>) -> f64 {
    given.unwrap_or_else(|| self.number(&config::RETENTION_DAYS))
  }

  /// A pass of the retention sweep as its thread runs it, its failure logged.
  pub fn sweep_in_background(&self) {
    let outcome = self
      .database
      .sweep_briefly(self.retention_days(None), now_ms());
    if let Some(Err(err)) = outcome {
      let detail = Some(err.to_string());
      self
        .logs
        .warn("quota:store", "retention sweep failed", detail);
    }
  }

  /// Once per open: start the retention sweep, and say what the lock self-test or the
  /// pragmas found wrong.
  fn after_open(&'static self) {
    self
      .database
      .spawn_sweeper(self.sweeper_interval, || self.sweep_in_background());
    if let Some(Ok(warnings)) = self
      .database
      .with_open(Access::Full, |db| Ok(db.open_report().warnings()))
    {
      for warning in warnings {
        self.logs.warn("quota:store", warning, None);
      }
    }
  }
}
