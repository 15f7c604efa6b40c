//! Compiled only with the `test-hooks` Cargo feature: what the edge's test-only exports
//! (`src/test_hooks.rs`, the test edge) do to the engine, so the JavaScript suites can show what
//! happens when it has a bug, and `npm run bench` can time an alternative.

use super::saturation::DecisionLookup;
use super::Engine;
use crate::core::dimensions::{DimensionKey, QuotaUnit, QuotaWindow};
use crate::core::enforce::{enforce, EnforceOutcome, QuotaRequest};
use crate::error::{QuotaError, Result};
use std::sync::atomic::AtomicU64;

/// How many times the open connection's file was checked (an `fstat`, and a path lookup
/// at most every 100 ms): what a request costs in system calls, counted, not timed.
pub static FILE_CHECKS: AtomicU64 = AtomicU64::new(0);

/// How many times the engine tried to open its database (SQLite's open and the migration).
pub static OPENS: AtomicU64 = AtomicU64::new(0);

impl Engine {
  /// Panics inside a write transaction on the engine's connection, after adding 1 to
  /// `api_key_id`'s counter of `pool_id:requests:hourly`: the connection's mutex is
  /// poisoned and the transaction left open, which the next call must roll back.
  pub fn panic_in_write_for_tests(&'static self, api_key_id: &str, pool_id: String) -> Result<()> {
    let key = DimensionKey::new(pool_id, QuotaUnit::Requests, QuotaWindow::Hourly);
    self.with_db(|db| {
      db.write_scope(|db| -> Result<()> {
        db.consume(api_key_id, &key, 1.0, super::now_ms())?;
        panic!("forced panic for tests (inside a write transaction)")
      })
    })
  }

  /// Opens (`hold = true`) or ends (`false`) a read transaction on the engine's
  /// connection.
  pub fn hold_read_transaction_for_tests(&'static self, hold: bool) -> Result<()> {
    self.with_db(|db| {
      let conn = db.connection();
      let result = if hold {
        conn.execute_batch("BEGIN").and_then(|()| {
          conn.query_row("SELECT count(*) FROM quota_consumption", [], |row| {
            row.get::<_, i64>(0)
          })
        })
      } else {
        conn.execute_batch("COMMIT").map(|()| 0)
      };
      result
        .map(|_| ())
        .map_err(|e| QuotaError::Store(e.to_string()))
    })
  }

  /// The enforce decision on the open connection, from whichever thread calls it, as its
  /// kind: `"allow"`, `"block"`, `"fetch"`, or `"error: …"`.
  pub fn decision_kind_for_bench(
    &self,
    api_key_id: &str,
    connection_id: &str,
    provider: &str,
    saturation_threshold: f64,
  ) -> String {
    let now = super::now_ms();
    let request = QuotaRequest {
      api_key_id,
      connection_id,
      provider,
      model: None,
    };
    let outcome = self
      .database
      .with_open(super::database::Access::Hot, |db| {
        db.hot_scope(|db| {
          let saturation = self.saturation();
          let lookup = DecisionLookup::new(&saturation, now);
          enforce(db, &lookup, &request, saturation_threshold, now)
        })
      })
      .unwrap_or_else(|| Err(QuotaError::Store("the database is not open".into())));
    match outcome {
      Ok(EnforceOutcome::Allow { .. }) => "allow".to_string(),
      Ok(EnforceOutcome::Block { .. }) => "block".to_string(),
      Ok(EnforceOutcome::NeedSaturation(_)) => "fetch".to_string(),
      Err(err) => format!("error: {err}"),
    }
  }

  /// How much the scheduler holds (`__schedulerSizesForTests`).
  pub fn scheduler_sizes_for_tests(&self) -> SchedulerSizes {
    let state = self.scheduler();
    let count = |n: usize| n as u32;
    SchedulerSizes {
      symbols: count(state.symbols.len()),
      inflight: count(state.scheduler.inflight.len()),
      bucket_connections: count(state.scheduler.buckets.connection_count()),
      drr_combos: count(state.scheduler.drr.combo_count()),
      drr_keys: count(state.scheduler.drr.key_count()),
    }
  }
}

/// How much the scheduler holds: interned names, in-flight slots, connections with
/// saturated buckets, combos with DRR state and their DRR deficits.
pub struct SchedulerSizes {
  pub symbols: u32,
  pub inflight: u32,
  pub bucket_connections: u32,
  pub drr_combos: u32,
  pub drr_keys: u32,
}
