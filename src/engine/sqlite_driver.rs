//! The SQLite driver ([`QuotaDriver`]): the counters in the host's `storage.sqlite`, on the
//! engine's one connection (`engine/database.rs`, which the Redis driver reads metadata
//! through too). Every operation answers at once on the calling thread: enforce from
//! memory while nothing was committed, else in one read transaction; records added to the
//! connection's buffer (`store/sqlite/record_buffer.rs`).

use super::config::RECORD_FLUSH_MS;
use super::driver::{Enforced, QuotaDriver, Settled, Written};
use super::hot_path::{Buffered, EnforceCall, RecordCall, Settle};
use super::saturation::DecisionLookup;
use super::{Engine, Step};
use crate::core::admission::estimated_cost;
use crate::core::dimensions::DimensionKey;
use crate::core::enforce::{consumption_writes, enforce};
use crate::error::Result;
use crate::store::ids::new_reservation_id;
use crate::store::sqlite::Recorded;
use crate::store::{CounterStore, PlanDimension, PoolUsageSnapshot};
use std::time::Duration;

/// The SQLite driver. It holds nothing: the connection is the engine's (the metadata of
/// either driver lives there), reached through [`Engine::with_db`] and its variants.
#[derive(Debug, Clone, Copy, Default)]
pub struct SqliteDriver;

/// `QUOTA_RECORD_FLUSH_MS`: how long a buffered record may wait for its commit.
fn flush_age(engine: &Engine) -> Duration {
  Duration::from_secs_f64(engine.number(&RECORD_FLUSH_MS) / 1000.0)
}

impl QuotaDriver for SqliteDriver {
  fn name(&self) -> &'static str {
    "sqlite"
  }

  fn url(&self) -> Option<&str> {
    None
  }

  fn enforce(
    &self,
    engine: &'static Engine,
    call: &EnforceCall,
    threshold: f64,
    reserve: bool,
  ) -> Step<Enforced> {
    let outcome = engine.with_hot_db(|db| {
      let request = call.ids.request();
      let saturation = engine.saturation();
      let lookup = DecisionLookup {
        state: &saturation,
        now_ms: call.now_ms,
      };
      if reserve {
        let estimate = estimated_cost(call.estimated_usd, call.estimated_tokens);
        db.enforce_reserving(
          &lookup,
          &request,
          threshold,
          &estimate,
          new_reservation_id(),
          call.now_ms,
        )
        .map(|(outcome, reservation)| (outcome, reservation.map(|r| r.token())))
      } else {
        db.hot_scope(|db| enforce(db, &lookup, &request, threshold, call.now_ms))
          .map(|outcome| (outcome, None))
      }
    });
    Step::Now(outcome)
  }

  fn record(&self, engine: &'static Engine, call: &RecordCall) -> Step<(Written, Buffered)> {
    let max_age = flush_age(engine);
    let result = engine.with_buffer_db(|db| {
      let writes = db.hot_scope(|db| consumption_writes(db, &call.ids.request(), &call.cost))?;
      db.record_writes(&call.ids.api_key_id, &writes, call.now_ms, max_age)
    });
    Step::Now(match result {
      Ok(recorded) => (Written::Done, recorded == Recorded::Buffered),
      // A record that could not be committed stays buffered, for the next flush.
      Err(err) => (Written::Failed(err), true),
    })
  }

  fn settle(&self, engine: &'static Engine, settle: &Settle) -> Step<Settled> {
    Step::Now(engine.with_db(|db| {
      db.settle_reservation(
        &settle.token,
        settle.api_key_id.as_deref(),
        settle.deltas(),
        settle.now_ms,
      )
    }))
  }

  fn consume(
    &self,
    engine: &'static Engine,
    api_key_id: String,
    key: DimensionKey,
    cost: f64,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    let max_age = flush_age(engine);
    Step::Now(
      engine.with_hot_db(|db| db.consume_buffered(&api_key_id, &key, cost, now_ms, max_age)),
    )
  }

  fn peek(
    &self,
    engine: &'static Engine,
    api_key_id: String,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    Step::Now(engine.with_hot_db(|db| db.hot_scope(|db| db.peek(&api_key_id, &key, now_ms))))
  }

  fn pool_consumed_total(
    &self,
    engine: &'static Engine,
    key: DimensionKey,
    now_ms: i64,
  ) -> Step<Result<f64>> {
    Step::Now(engine.with_hot_db(|db| db.hot_scope(|db| db.pool_consumed_total(&key, now_ms))))
  }

  fn clear(
    &self,
    engine: &'static Engine,
    api_key_id: String,
    key: DimensionKey,
    _now_ms: i64,
  ) -> Step<Result<()>> {
    Step::Now(engine.with_db(|db| db.clear(&api_key_id, &key)))
  }

  fn pool_usage(
    &self,
    engine: &'static Engine,
    pool_id: String,
    dims: Vec<PlanDimension>,
    now_ms: i64,
  ) -> Step<Result<PoolUsageSnapshot>> {
    Step::Now(engine.with_db(|db| db.pool_usage_with_dimensions(&pool_id, &dims, now_ms)))
  }
}
