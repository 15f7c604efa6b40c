//! The Redis driver ([`QuotaDriver`]): the counters on Redis at one URL, shared by every
//! replica; the metadata stays in SQLite, read on the calling thread. An operation is one
//! round trip on the addon's tokio runtime — or, for enforce, peek and pool totals, an
//! answer at once from the counter view (`engine/redis_view.rs`). Records are buffered
//! (write-behind, `engine/redis_writes.rs`) and every read adds this process's buffer.

use super::driver::{CounterAt, Enforced, QuotaDriver, Settled, Written};
use super::hot_path::{Buffered, EnforceCall, RecordCall, Settle};
use super::saturation::DecisionLookup;
use super::{Engine, Step};
use crate::core::admission::{compile_checks, estimated_cost, reserved_outcome, Reservation};
use crate::core::dimensions::bucket_index;
use crate::core::dimensions::DimensionKey;
use crate::core::enforce::{
  consumption_writes, plan_enforce, planned_writes, CounterRead, EnforceOutcome, EnforceStart,
};
use crate::error::Result;
use crate::store::ids::new_reservation_id;
use crate::store::redis::keys::base_pool_id;
use crate::store::redis::{counters, PoolTotals, RedisBackend, Reserved};
use crate::store::{PlanDimension, PoolUsageSnapshot};
use std::sync::Arc;

/// The Redis driver of one URL. It holds the URL, not the backend: the backend is looked
/// up by URL on each use (`Engine::redis_backend`), so `resetRedisClient()` — which
/// forgets a URL's backend — reaches every holder of the driver.
#[derive(Debug, Clone)]
pub struct RedisDriver {
  /// As given (password included).
  url: String,
}

impl RedisDriver {
  pub fn new(url: String) -> Self {
    RedisDriver { url }
  }

  /// The backend of this driver's URL.
  fn backend(&self, engine: &Engine) -> Result<Arc<RedisBackend>> {
    engine.redis_backend(&self.url)
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

impl QuotaDriver for RedisDriver {
  fn name(&self) -> &'static str {
    "redis"
  }

  fn url(&self) -> Option<&str> {
    Some(&self.url)
  }

  fn enforce(
    &self,
    engine: &'static Engine,
    call: &EnforceCall,
    threshold: f64,
    reserve: bool,
  ) -> Step<Enforced> {
    let backend = match self.backend(engine) {
      Ok(backend) => backend,
      Err(err) => return Step::Now(Err(err)),
    };
    let now = call.now_ms;
    let estimate = estimated_cost(call.estimated_usd, call.estimated_tokens);
    // Metadata as on SQLite: from memory while nothing was committed, else in one read
    // transaction (store/sqlite/hot.rs; its counters are not read here).
    let start = engine.with_decision_db(call, |db| {
      db.hot_scope(|db| {
        let request = call.ids.request();
        let saturation = engine.saturation();
        let lookup = DecisionLookup::new(&saturation, now);
        let start = plan_enforce(db, &lookup, &request, threshold, now)?;
        let writes = match (&start, reserve) {
          (EnforceStart::Read(_), true) => planned_writes(db, &request, &estimate)?,
          _ => Vec::new(),
        };
        Ok((start, writes))
      })
    });
    let (plan, writes) = match start {
      Ok((EnforceStart::Read(plan), writes)) => (plan, writes),
      Ok((EnforceStart::Done(outcome), _)) => return Step::Now(Ok((outcome, None))),
      Err(err) => return Step::Now(Err(err)),
    };
    let mut batch = backend.batch(plan.pool().allocations.iter().map(|a| a.api_key_id.clone()));
    for read in plan.reads() {
      match read {
        CounterRead::Key { key, current } => batch.key(&call.ids.api_key_id, key, *current),
        CounterRead::Pool { key, current } => batch.pool(key, *current),
      };
    }
    // Reserve mode needs the saturation known (else: the default read answers — a fetch,
    // or a model-cap block).
    let compiled = if reserve { compile_checks(&plan) } else { None };
    match compiled {
      None => {
        // The counter view (docs/redis.md#the-counter-view): counters read less than the
        // maximum staleness ago and changed by no one since decide here.
        let view = engine.redis_view(&backend);
        if let Some(view) = &view {
          let viewed = engine.viewed(&backend, &batch, view, now);
          engine.metrics.redis_view(viewed.is_some());
          if let Some(values) = viewed {
            return Step::Now(Ok((plan.decide(&call.ids.request(), &values), None)));
          }
        }
        // This process's buffered records count, flushed or not (docs/redis.md#write-behind).
        let ids = call.ids.clone();
        Step::later(async move {
          let values = engine.read_kept(&backend, batch, view, now).await?;
          Ok((plan.decide(&ids.request(), &values), None))
        })
      }
      Some(compiled) => {
        let reservation = (!writes.is_empty())
          .then(|| Reservation::new(new_reservation_id(), &call.ids.api_key_id, writes, now));
        let (ids, url) = (call.ids.clone(), backend.url().to_string());
        // The script decides on what Redis holds: records buffered before reserve mode
        // was switched on go first.
        let reserve = Step::later(async move {
          let checks = &compiled.checks;
          let read = counters::reserve(&backend, &batch, checks, reservation.as_ref(), now).await;
          read.map(
            |Reserved {
               blocked,
               values,
               skipped,
             }| {
              let skipped: Vec<&str> = skipped.iter().map(String::as_str).collect();
              engine.redis_counters_skipped("skipped {} quota counters of a reservation", &skipped);
              let outcome = reserved_outcome(&plan, &compiled, &ids.request(), blocked, &values);
              let reservation =
                reservation.filter(|_| matches!(outcome, EnforceOutcome::Allow { .. }));
              (outcome, reservation.map(|r| r.token()))
            },
          )
        });
        engine.after_redis_flush(&url, reserve)
      }
    }
  }

  fn record(&self, engine: &'static Engine, call: &RecordCall) -> Step<(Written, Buffered)> {
    let behind = engine.redis_write_behind();
    let written = |result: Result<()>| {
      let written = result.map_or_else(Written::Failed, |()| Written::Done);
      (written, false)
    };
    let writes = engine
      .with_hot_db(|db| db.hot_scope(|db| consumption_writes(db, &call.ids.request(), &call.cost)));
    let writes = match writes {
      Ok(writes) if writes.is_empty() => return Step::Now((Written::Nothing, false)),
      Ok(writes) => writes,
      Err(err) => return Step::Now(written(Err(err))),
    };
    let (api_key_id, now) = (&call.ids.api_key_id, call.now_ms);
    if behind {
      // Write-behind (docs/redis.md#write-behind): answered now, sent by the flush.
      return Step::Now(written(
        engine.buffer_redis_writes(&self.url, api_key_id, &writes, now),
      ));
    }
    let write = self
      .backend(engine)
      .and_then(|backend| counters::consume_many(backend, api_key_id, &writes, now));
    match write {
      Ok(write) => Step::later(async move { written(write.await) }),
      Err(err) => Step::Now(written(Err(err))),
    }
  }

  fn settle(&self, engine: &'static Engine, settle: &Settle) -> Step<Settled> {
    let (token, api_key_id) = (settle.token.clone(), settle.api_key_id.clone());
    let deltas = settle.deltas();
    let settle = self.backend(engine).map(|backend| async move {
      let settled = counters::settle_reservation(backend, token, api_key_id, deltas).await?;
      Ok(settled.map(|skipped| {
        let skipped: Vec<&str> = skipped.iter().map(String::as_str).collect();
        engine.redis_counters_skipped("skipped {} quota counters of a settle", &skipped);
      }))
    });
    later(settle)
  }

  fn consume(&self, engine: &'static Engine, at: CounterAt, cost: f64) -> Step<Result<f64>> {
    let consume = (self.backend(engine))
      .and_then(|backend| counters::consume(backend, at.api_key_id, at.key, cost, at.now_ms));
    engine.after_redis_flush(&self.url, later(consume))
  }

  fn peek(&self, engine: &'static Engine, at: CounterAt) -> Step<Result<f64>> {
    let read = self.backend(engine).and_then(|backend| {
      crate::store::validate::key(&at.api_key_id, &at.key)?;
      let mut batch = backend.batch([]);
      batch.key(
        &at.api_key_id,
        &at.key,
        bucket_index(at.now_ms, at.key.window.ms()),
      );
      Ok((backend, batch))
    });
    engine.redis_value(read, at.key.window.ms(), at.now_ms)
  }

  fn pool_consumed_total(
    &self,
    engine: &'static Engine,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    let read = crate::store::validate::non_empty(&key.pool_id, "dim.poolId").and_then(|()| {
      let backend = self.backend(engine)?;
      // The buckets' totals need no key list (docs/redis.md#pool-totals); the exact sum
      // takes the allocations of the pool the dimension key belongs to.
      let pool = match backend.totals() {
        PoolTotals::Aggregate => None,
        PoolTotals::Exact => engine.with_db(|db| db.cached_pool(base_pool_id(&key.pool_id)))?,
      };
      let ids = pool
        .iter()
        .flat_map(|p| &p.allocations)
        .map(|a| a.api_key_id.clone());
      let mut batch = backend.batch(ids);
      batch.pool(&key, bucket_index(now_ms, key.window.ms()));
      Ok((backend, batch))
    });
    engine.redis_value(read, key.window.ms(), now_ms)
  }

  fn clear(&self, engine: &'static Engine, at: CounterAt) -> Step<Result<()>> {
    let clear = (self.backend(engine))
      .and_then(|backend| counters::clear(backend, at.api_key_id, at.key, at.now_ms));
    engine.after_redis_flush(&self.url, later(clear))
  }

  fn pool_usage(
    &self,
    engine: &'static Engine,
    pool_id: String,
    dims: Vec<PlanDimension>,
    now_ms: i64,
  ) -> Step<Result<PoolUsageSnapshot>> {
    let prepared = self.backend(engine).and_then(|backend| {
      let allocations = engine
        .with_db(|db| db.cached_pool(&pool_id))?
        .map(|p| p.allocations.clone());
      Ok(counters::pool_usage(
        backend,
        pool_id,
        allocations,
        dims,
        now_ms,
      ))
    });
    engine.after_redis_flush(&self.url, later(prepared))
  }
}
