//! The hot path (docs/contract.md §7) as one call each, on whichever driver was chosen:
//! `enforceQuotaShare`, `recordConsumption`, and — in reserve admission mode (beyond the
//! contract, docs/admission.md) — the reservation an allow carries and its settling or
//! release. Decisions are values; the engine's own faults fail open here, counted and
//! logged once per fault, so the edge never sees an error from these calls.
//!
//! SQLite answers on the calling thread: from memory while nothing was committed, else in
//! one read transaction, and records are buffered (`store/sqlite/record_buffer.rs`).
//! Redis reads the metadata on the calling thread, then does one round trip; its records
//! are buffered too (write-behind, `engine/redis_writes.rs`) and its reads add the buffer.

use super::config::{AdmissionMode, RECORD_FLUSH_MS, SATURATION_THRESHOLD};
use super::driver::Driver;
use super::faults::Operation;
use super::logs::LogValue;
use super::metrics::{AllowReason, Counted, StoreOperation};
use super::saturation::DecisionLookup;
use super::{Engine, Step};
use crate::core::admission::{
  compile_checks, estimated_cost, reserved_outcome, CheckSide, CompiledAdmission, Reservation,
  ReservationToken,
};
use crate::core::dimensions::{QuotaUnit, QuotaWindow};
use crate::core::enforce::{
  consumption_writes, enforce, plan_enforce, planned_writes, BlockReason, ConsumptionCost,
  EnforceOutcome, EnforceStart, QuotaRequest,
};
use crate::error::{QuotaError, Result};
use crate::store::ids::new_reservation_id;
use crate::store::redis::counters;
use crate::store::redis::scripts::ScriptCheck;
use crate::store::sqlite::{FileChange, Recorded};
use std::time::Duration;

/// Who a hot-path call is for: the request's API key, connection, provider and model.
#[derive(Debug, Clone, Default)]
pub struct RequestIds {
  pub api_key_id: String,
  pub connection_id: String,
  pub provider: String,
  pub model: Option<String>,
}

impl RequestIds {
  /// The request as the core reads it; an empty model counts as none.
  pub fn request(&self) -> QuotaRequest<'_> {
    QuotaRequest {
      api_key_id: &self.api_key_id,
      connection_id: &self.connection_id,
      provider: &self.provider,
      model: self.model.as_deref().filter(|m| !m.is_empty()),
    }
  }

  /// Empty ids are not enforced (nor recorded).
  fn is_empty(&self) -> bool {
    self.api_key_id.is_empty() || self.connection_id.is_empty()
  }
}

/// One `enforceQuotaShare` call.
#[derive(Debug, Clone, Default)]
pub struct EnforceCall {
  pub ids: RequestIds,
  /// Reserve mode: the estimated USD and tokens to reserve.
  pub estimated_usd: Option<f64>,
  pub estimated_tokens: Option<f64>,
  pub now_ms: i64,
  /// When the request's decision began (monotonic ms), for a call made again — after a
  /// saturation fetch or a driver choice — so its latency counts from the first call.
  pub started_ms: Option<f64>,
  /// The call is the one after a saturation fetch: do not ask for one again.
  pub after_fetch: bool,
}

/// What an enforce call decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
  /// `deprioritize` absent when no rule ran (not enforced, fail-open); `reservation` in
  /// reserve mode.
  Allow {
    deprioritize: Option<bool>,
    reservation: Option<String>,
  },
  Block {
    reason: BlockReason,
    message: String,
    retry_after_seconds: Option<f64>,
  },
  /// Fetch the saturation of these dimensions through the host's fetchers, then call
  /// again with `after_fetch` and `started_ms`.
  Fetch {
    dims: Vec<(QuotaUnit, QuotaWindow)>,
    started_ms: f64,
  },
}

const NOT_ENFORCED: Decision = Decision::Allow {
  deprioritize: None,
  reservation: None,
};

/// One `recordConsumption` call.
#[derive(Debug, Clone, Default)]
pub struct RecordCall {
  pub ids: RequestIds,
  pub cost: ConsumptionCost,
  /// Reserve mode: the reservation enforce returned, settled with `cost`.
  pub reservation: Option<String>,
  pub now_ms: i64,
}

/// A settle or release of one reservation.
#[derive(Debug, Clone)]
struct Settle {
  token: ReservationToken,
  /// The API key the record is for (`None`: a release, which names none).
  api_key_id: Option<String>,
  cost: ConsumptionCost,
  release: bool,
  now_ms: i64,
}

impl Settle {
  fn message(&self) -> &'static str {
    if self.release {
      "releasing a quota reservation failed"
    } else {
      "settling a quota reservation failed"
    }
  }
}

/// Whether records were left buffered: the caller arranges a flush on its event loop.
pub type Buffered = bool;

/// The checks as `reserve.lua` takes them.
fn script_checks(compiled: &CompiledAdmission, now_ms: i64) -> Vec<ScriptCheck> {
  compiled
    .checks
    .iter()
    .map(|c| ScriptCheck {
      group: match c.side {
        CheckSide::Read(i) => Some(i),
        CheckSide::Always => None,
      },
      prev_weight: c.prev_weight(now_ms),
      threshold: c.threshold,
    })
    .collect()
}

impl Engine {
  /// `enforceQuotaShare`.
  pub fn enforce(&'static self, call: EnforceCall) -> Step<Decision> {
    self.enforce_with(call, None)
  }

  /// [`Engine::enforce`] on `driver`, or — `None` — on the chosen one, after the choice
  /// when one is in flight.
  fn enforce_with(&'static self, mut call: EnforceCall, driver: Option<Driver>) -> Step<Decision> {
    let started = call.started_ms.unwrap_or_else(|| self.monotonic_ms());
    if call.ids.is_empty() {
      return Step::Now(self.decided(
        Ok((EnforceOutcome::Allow { deprioritize: None }, None)),
        &call,
        started,
      ));
    }
    let driver = match driver.map_or_else(|| self.current_driver(), Ok) {
      Ok(driver) => driver,
      Err(choosing) => {
        call.started_ms = Some(started);
        return Step::later(async move {
          let driver = choosing.resolve().await;
          self.enforce_with(call, Some(driver)).resolve().await
        });
      }
    };
    let threshold = self.number(&SATURATION_THRESHOLD);
    let reserve = self.admission() == AdmissionMode::Reserve;
    match driver {
      Driver::Sqlite => {
        let outcome = self.with_hot_db(|db| {
          let request = call.ids.request();
          let saturation = self.saturation();
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
        Step::Now(self.decided(outcome, &call, started))
      }
      Driver::Redis(url) => match self.redis_backend(&url) {
        Ok(backend) => self.enforce_on_redis(backend, call, threshold, reserve, started),
        Err(err) => Step::Now(self.decided(Err(err), &call, started)),
      },
    }
  }

  fn enforce_on_redis(
    &'static self,
    backend: std::sync::Arc<crate::store::redis::RedisBackend>,
    call: EnforceCall,
    threshold: f64,
    reserve: bool,
    started: f64,
  ) -> Step<Decision> {
    let now = call.now_ms;
    let estimate = estimated_cost(call.estimated_usd, call.estimated_tokens);
    // Metadata as on SQLite: from memory while nothing was committed, else in one read
    // transaction (store/sqlite/hot.rs; its counters are not read here).
    let start = self.with_hot_db(|db| {
      db.hot_scope(|db| {
        let request = call.ids.request();
        let saturation = self.saturation();
        let lookup = DecisionLookup {
          state: &saturation,
          now_ms: now,
        };
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
      Ok((EnforceStart::Done(outcome), _)) => {
        return Step::Now(self.decided(Ok((outcome, None)), &call, started))
      }
      Err(err) => return Step::Now(self.decided(Err(err), &call, started)),
    };
    let batch = counters::counter_batch(
      &backend,
      &call.ids.api_key_id,
      plan.pool().allocations.iter().map(|a| a.api_key_id.clone()),
      plan.reads(),
    );
    // Reserve mode needs the saturation known (else: the default read answers — a fetch,
    // or a model-cap block).
    let compiled = if reserve { compile_checks(&plan) } else { None };
    match compiled {
      None => {
        // The counter view (docs/redis.md#the-counter-view): counters read less than the
        // maximum staleness ago and changed by no one since decide here, with this
        // process's buffered records added as after a read. The epoch is checked after
        // the buffer is read: a flush that settled meanwhile had dropped the entry first.
        let view = self.redis_view(&backend);
        if let Some((view, max_age)) = &view {
          if let Some((mut values, epoch)) = view.lookup(&batch, now, *max_age) {
            self
              .redis_writes
              .overlay(backend.url(), &batch, &mut values);
            if view.unchanged(epoch) {
              self.metrics.redis_view(true);
              let outcome = plan.decide(&call.ids.request(), &values);
              return Step::Now(self.decided(Ok((outcome, None)), &call, started));
            }
          }
          self.metrics.redis_view(false);
        }
        Step::later(async move {
          // This process's buffered records count, flushed or not (docs/redis.md#write-behind),
          // each once: no flush is out while the read is (see RedisWrites::gates).
          let gate = self.redis_writes.gate(backend.url());
          let _shared = gate.read().await;
          let stamp = view.as_ref().and_then(|(view, _)| view.stamp(&batch));
          let outcome = counters::read(&backend, &batch).await.map(|mut values| {
            // Kept as Redis answered (the buffer is added at each use), still under the
            // gate: the next flush drops it when it is answered.
            if let (Some((view, _)), Some(stamp)) = (&view, stamp) {
              view.keep(batch.clone(), &values, stamp, now);
            }
            self
              .redis_writes
              .overlay(backend.url(), &batch, &mut values);
            (plan.decide(&call.ids.request(), &values), None)
          });
          self.decided(outcome, &call, started)
        })
      }
      Some(compiled) => {
        let reservation = (!writes.is_empty())
          .then(|| Reservation::new(new_reservation_id(), &call.ids.api_key_id, writes, now));
        let additions = reservation
          .as_ref()
          .map(Reservation::additions)
          .unwrap_or_default();
        let checks = script_checks(&compiled, now);
        Step::later(async move {
          // The script decides on what Redis holds: records buffered before reserve mode
          // was switched on go first.
          if self.redis_writes.holds(backend.url()) {
            self.flush_redis(backend.url().to_string()).await;
          }
          let outcome = counters::reserve(
            &backend,
            &batch,
            &checks,
            &call.ids.api_key_id,
            &additions,
            reservation.as_ref(),
            now,
          )
          .await
          .map(|(blocked, values)| {
            let outcome = reserved_outcome(&plan, &compiled, &call.ids.request(), blocked, &values);
            let reservation =
              reservation.filter(|_| matches!(outcome, EnforceOutcome::Allow { .. }));
            (outcome, reservation.map(|r| r.token()))
          });
          self.decided(outcome, &call, started)
        })
      }
    }
  }

  /// The decision of an outcome, counted in the metrics; a fault fails open.
  fn decided(
    &self,
    outcome: Result<(EnforceOutcome, Option<String>)>,
    call: &EnforceCall,
    started: f64,
  ) -> Decision {
    let (decision, counted) = match outcome {
      Ok((EnforceOutcome::Allow { deprioritize }, reservation)) => {
        let reason = match deprioritize {
          None => AllowReason::NotEnforced,
          Some(false) => AllowReason::Ok,
          Some(true) => AllowReason::Deprioritized,
        };
        (
          Decision::Allow {
            deprioritize,
            reservation,
          },
          Counted::Allow(reason),
        )
      }
      Ok((
        EnforceOutcome::Block {
          reason,
          message,
          retry_after_seconds,
        },
        _,
      )) => (
        Decision::Block {
          reason,
          message,
          retry_after_seconds,
        },
        Counted::Block(reason),
      ),
      Ok((EnforceOutcome::NeedSaturation(_), _)) if call.after_fetch => {
        // Still missing after one fetch (a fetcher registered meanwhile): do not wait again.
        (NOT_ENFORCED, Counted::Allow(AllowReason::SaturationPending))
      }
      Ok((EnforceOutcome::NeedSaturation(dims), _)) => {
        return Decision::Fetch {
          dims: dims.iter().map(|d| (d.unit, d.window)).collect(),
          started_ms: started,
        };
      }
      Err(err) => {
        self.metrics.store_error(StoreOperation::Enforce);
        self.faults.failed(
          &self.logs,
          Operation::Enforce,
          "quota enforcement failed; allowing the request",
          &err.to_string(),
          vec![
            ("apiKeyId", LogValue::Text(call.ids.api_key_id.clone())),
            (
              "connectionId",
              LogValue::Text(call.ids.connection_id.clone()),
            ),
          ],
        );
        (NOT_ENFORCED, Counted::Allow(AllowReason::FailOpen))
      }
    };
    if counted != Counted::Allow(AllowReason::FailOpen) && !call.ids.api_key_id.is_empty() {
      self.faults.succeeded(&self.logs, Operation::Enforce);
    }
    self
      .metrics
      .decision(counted, (self.monotonic_ms() - started) / 1000.0);
    decision
  }

  /// `recordConsumption`: every plan dimension and the model bucket, buffered on SQLite
  /// (or committed at once with `QUOTA_RECORD_FLUSH_MS=0`); on Redis buffered too and
  /// flushed in one script call per flush (`engine/redis_writes.rs`), or — flush window 0,
  /// or reserve admission — one script per record.
  pub fn record(&'static self, call: RecordCall) -> Step<Buffered> {
    self.record_with(call, None)
  }

  /// [`Engine::record`] on `driver`, or on the chosen one (after a choice in flight).
  fn record_with(&'static self, call: RecordCall, driver: Option<Driver>) -> Step<Buffered> {
    if call.ids.is_empty() {
      return Step::Now(false);
    }
    if let Some(reservation) = call.reservation.clone() {
      return match self.settle(
        &reservation,
        Some(&call.ids.api_key_id),
        call.cost,
        false,
        call.now_ms,
      ) {
        Ok(step) => step,
        Err(err) => {
          // The host's bug, not a store fault: said every time, never counted as a fault.
          self.logs.push(
            "warn",
            "quota:enforce",
            "settling a quota reservation failed",
            vec![
              ("apiKeyId", LogValue::Text(call.ids.api_key_id.clone())),
              ("error", LogValue::Text(err.to_string())),
            ],
          );
          Step::Now(false)
        }
      };
    }
    let driver = match driver.map_or_else(|| self.current_driver(), Ok) {
      Ok(driver) => driver,
      Err(choosing) => {
        return Step::later(async move {
          let driver = choosing.resolve().await;
          self.record_with(call, Some(driver)).resolve().await
        })
      }
    };
    match driver {
      Driver::Sqlite => {
        let flush_ms = self.number(&RECORD_FLUSH_MS);
        let max_age = Duration::from_secs_f64(flush_ms / 1000.0);
        let result = self.with_buffer_db(|db| {
          let writes =
            db.hot_scope(|db| consumption_writes(db, &call.ids.request(), &call.cost))?;
          db.record_writes(&call.ids.api_key_id, &writes, call.now_ms, max_age)
        });
        let buffered = match result {
          Ok(recorded) => {
            self.faults.succeeded(&self.logs, Operation::Record);
            recorded == Recorded::Buffered
          }
          Err(err) => {
            self.record_failed(
              "recording quota consumption failed",
              &err,
              &call.ids.api_key_id,
            );
            // A record that could not be committed stays buffered, for the next flush.
            true
          }
        };
        Step::Now(buffered)
      }
      Driver::Redis(url) => {
        let behind = self.redis_write_behind();
        let prepared = self
          .with_hot_db(|db| {
            db.hot_scope(|db| consumption_writes(db, &call.ids.request(), &call.cost))
          })
          .and_then(|writes| {
            if writes.is_empty() {
              return Ok(None);
            }
            if behind {
              // Write-behind (docs/redis.md#write-behind): answered now, sent by the flush.
              self.buffer_redis_writes(&url, &call.ids.api_key_id, &writes, call.now_ms)?;
              self.faults.succeeded(&self.logs, Operation::Record);
              return Ok(None);
            }
            counters::consume_many(
              self.redis_backend(&url)?,
              call.ids.api_key_id.clone(),
              writes,
              call.now_ms,
            )
            .map(Some)
          });
        match prepared {
          Ok(None) => Step::Now(false),
          Err(err) => {
            self.record_failed(
              "recording quota consumption failed",
              &err,
              &call.ids.api_key_id,
            );
            Step::Now(false)
          }
          Ok(Some(write)) => Step::later(async move {
            match write.await {
              Ok(()) => self.faults.succeeded(&self.logs, Operation::Record),
              Err(err) => self.record_failed(
                "recording quota consumption failed",
                &err,
                &call.ids.api_key_id,
              ),
            }
            false
          }),
        }
      }
    }
  }

  fn record_failed(&self, msg: &str, err: &QuotaError, api_key_id: &str) {
    self.metrics.store_error(StoreOperation::Record);
    let context = if api_key_id.is_empty() {
      Vec::new()
    } else {
      vec![("apiKeyId", LogValue::Text(api_key_id.to_string()))]
    };
    self.faults.failed(
      &self.logs,
      Operation::Record,
      msg,
      &err.to_string(),
      context,
    );
  }

  /// Settles (`release: false`: adds `actual − reserved` per counter, into the
  /// reservation's own buckets) or releases (`release: true`: subtracts what was reserved)
  /// a reservation, at most once; buckets never go below 0. A value that is not a
  /// reservation token is an error and writes nothing. A token the store refuses —
  /// unknown, already settled or released, expired, made for another `api_key_id` or pool
  /// — is warned about and changes nothing (docs/admission.md); a store failure is a fault.
  pub fn settle(
    &'static self,
    reservation: &str,
    api_key_id: Option<&str>,
    cost: ConsumptionCost,
    release: bool,
    now_ms: i64,
  ) -> Result<Step<Buffered>> {
    let token = ReservationToken::parse(reservation, "reservation")?;
    let settle = Settle {
      token,
      api_key_id: api_key_id.map(str::to_string),
      cost,
      release,
      now_ms,
    };
    Ok(self.settle_on(None, settle))
  }

  /// Runs a [`Settle`] on `driver`, or on the chosen one (after a choice in flight).
  fn settle_on(&'static self, driver: Option<Driver>, settle: Settle) -> Step<Buffered> {
    let driver = match driver.map_or_else(|| self.current_driver(), Ok) {
      Ok(driver) => driver,
      Err(choosing) => {
        return Step::later(async move {
          let driver = choosing.resolve().await;
          self.settle_on(Some(driver), settle).resolve().await
        })
      }
    };
    let msg = settle.message();
    let who = settle.api_key_id.clone().unwrap_or_default();
    let (cost, release) = (settle.cost, settle.release);
    let deltas = move |r: &Reservation| {
      if release {
        r.release_deltas()
      } else {
        r.settle_deltas(&cost)
      }
    };
    match driver {
      Driver::Sqlite => {
        let result = self.with_db(|db| {
          db.settle_reservation(
            &settle.token,
            settle.api_key_id.as_deref(),
            deltas,
            settle.now_ms,
          )
        });
        self.settled(result, &settle, msg, &who);
        Step::Now(false)
      }
      Driver::Redis(url) => match self.redis_backend(&url) {
        Err(err) => {
          self.record_failed(msg, &err, &who);
          Step::Now(false)
        }
        Ok(backend) => {
          let work = counters::settle_reservation(
            backend,
            settle.token.clone(),
            settle.api_key_id.clone(),
            deltas,
          );
          Step::later(async move {
            let result = work.await;
            self.settled(result, &settle, msg, &who);
            false
          })
        }
      },
    }
  }

  /// What a settle came to: done, refused (one warning, nothing changed) or a fault.
  fn settled(
    &self,
    result: Result<std::result::Result<(), &'static str>>,
    settle: &Settle,
    msg: &str,
    who: &str,
  ) {
    match result {
      Ok(Ok(())) => self.faults.succeeded(&self.logs, Operation::Record),
      Ok(Err(why)) => {
        let mut fields = vec![
          ("reservation", LogValue::Text(settle.token.id.clone())),
          ("error", LogValue::Text(why.to_string())),
        ];
        if !who.is_empty() {
          fields.insert(0, ("apiKeyId", LogValue::Text(who.to_string())));
        }
        self.logs.push(
          "warn",
          "quota:enforce",
          format!("{msg}: the reservation was refused; nothing changed"),
          fields,
        );
      }
      Err(err) => self.record_failed(msg, &err, who),
    }
  }

  /// A failure the JavaScript glue caught: one warning per fault; an enforce one is also
  /// counted as a fail-open decision.
  pub fn failed_in_glue(&self, enforce: bool, msg: &str, error: &str, api_key_id: Option<String>) {
    let context = api_key_id
      .map(|key| vec![("apiKeyId", LogValue::Text(key))])
      .unwrap_or_default();
    if enforce {
      self
        .faults
        .failed(&self.logs, Operation::Enforce, msg, error, context);
      self
        .metrics
        .decision(Counted::Allow(AllowReason::FailOpen), 0.0);
    } else {
      self.metrics.store_error(StoreOperation::Record);
      self
        .faults
        .failed(&self.logs, Operation::Record, msg, error, context);
    }
  }

  /// The driver for a hot-path call (see [`Engine::driver_for_call`]), a re-choice run in
  /// the background.
  fn current_driver(&'static self) -> std::result::Result<Driver, super::Step<Driver>> {
    self.driver_for_call(&|choosing| self.in_background(choosing))
  }

  /// A JS thread that buffered records is torn down: the buffer is committed if the
  /// database is open (nothing is reported: no JavaScript runs any more).
  pub fn commit_at_teardown(&self) {
    let _ = crate::store::sqlite::with_hot_open_db(|db| db.flush_pending(false));
  }

  /// Commits `recordConsumption`'s buffered records now (never opens the database).
  /// Returns the error message, or `None`; the records stay buffered on an error, and
  /// the failure is a fault (logged once).
  /// Records carried from a file that was replaced are committed to the file now at the
  /// path, opening it (docs/reliability.md, "Durability of records").
  pub fn flush(&'static self, automatic: bool) -> Option<String> {
    // Redis's buffer (docs/redis.md#write-behind), waited for; its faults are its own.
    let redis_error = self.flush_redis_blocking();
    crate::store::sqlite::recheck_file();
    let mut result = crate::store::sqlite::with_hot_open_db(|db| db.flush_pending(automatic));
    if crate::store::sqlite::carried_count() > 0 {
      result = Some(self.with_hot_db(|db| db.flush_pending(automatic)));
    }
    let error = result
      .and_then(|result| result.err())
      .map(|e| e.to_string());
    self.report_file_changes();
    match &error {
      Some(message) => {
        self.metrics.store_error(StoreOperation::Record);
        let buffered = self.pending_writes();
        self.faults.failed(
          &self.logs,
          Operation::Flush,
          "committing buffered quota records failed; they stay buffered and are retried",
          message,
          vec![("buffered", LogValue::Number(buffered as f64))],
        );
      }
      None if redis_error.is_none() => self.faults.succeeded(&self.logs, Operation::Flush),
      None => {}
    }
    error.or(redis_error)
  }

  /// The event loop's flush timer (docs/sqlite.md, "Records are buffered"): commits the
  /// buffer when its oldest record is `QUOTA_RECORD_FLUSH_MS` old, so records of many
  /// requests share one commit. Returns how many milliseconds to wait before asking
  /// again, or `-1` when nothing is buffered (no timer needed). A failed commit is a fault
  /// (logged once), and the answer is then the back-off of a second.
  pub fn flush_when_due(&'static self) -> f64 {
    let max_age = Duration::from_secs_f64(self.number(&RECORD_FLUSH_MS) / 1000.0);
    let mut wait = crate::store::sqlite::with_hot_open_db(|db| Ok(db.flush_wait(max_age)))
      .and_then(|r| r.ok())
      .flatten();
    if crate::store::sqlite::carried_count() > 0 {
      wait = Some(Duration::ZERO);
    }
    self.report_file_changes();
    match wait {
      None => -1.0,
      Some(wait) if !wait.is_zero() => wait.as_secs_f64() * 1000.0,
      Some(_) => match self.flush(true) {
        None => -1.0,
        Some(_) => crate::store::sqlite::RETRY_AFTER_FAILURE.as_secs_f64() * 1000.0,
      },
    }
  }

  /// Logs what became of buffered records whose file was replaced or went away (one
  /// atomic load when nothing happened).
  pub fn report_file_changes(&self) {
    for change in crate::store::sqlite::take_file_changes() {
      let (message, counters, path, error) = match change {
        FileChange::Carried { counters, path } => (
          "the database file was replaced while quota records were buffered; they are committed to the file now at its path, not to the old one",
          counters,
          path,
          None,
        ),
        FileChange::Gone { counters, path, error } => (
          "the database file was deleted or renamed away while quota records were buffered; they were committed to the old file if it still exists under another name, and none of them is in a file at its path",
          counters,
          path,
          error,
        ),
      };
      let mut context = vec![
        ("counters", LogValue::Number(counters as f64)),
        ("path", LogValue::Text(path.display().to_string())),
      ];
      if let Some(error) = error {
        context.push(("error", LogValue::Text(error)));
      }
      self.logs.push("warn", "quota:store", message, context);
    }
  }

  /// How many counters are buffered, not yet committed.
  pub fn pending_writes(&self) -> usize {
    let open = crate::store::sqlite::with_hot_open_db(|db| Ok(db.pending_count()))
      .and_then(|r| r.ok())
      .unwrap_or(0);
    self.report_file_changes();
    open + crate::store::sqlite::carried_count() + self.redis_writes.pending()
  }
}
