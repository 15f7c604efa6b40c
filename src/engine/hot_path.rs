//! The hot path (docs/contract.md §7) as one call each, on whichever driver was chosen:
//! `enforceQuotaShare`, `recordConsumption`, and — in reserve admission mode
//! (docs/admission.md) — the reservation an allow carries and its settling or release.
//! Each call reaches its driver once; what the driver answers is decided, counted and
//! logged here. The engine's own faults fail open here, counted and logged once per fault,
//! so the edge never sees an error from these calls.

use super::config::{AdmissionMode, RECORD_FLUSH_MS, SATURATION_THRESHOLD};
use super::database::{Access, FileChange};
use super::driver::{Driver, Enforced, Settled, Written};
use super::telemetry::{AllowReason, Counted};
use super::telemetry::{LogValue, Operation};
use super::{Engine, Step};
use crate::core::admission::{BucketDelta, Reservation, ReservationToken};
use crate::core::dimensions::{QuotaUnit, QuotaWindow};
use crate::core::enforce::{BlockReason, ConsumptionCost, EnforceOutcome, QuotaRequest};
use crate::error::{QuotaError, Result};
use std::sync::atomic::Ordering;
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
  /// The crossing has just checked that the connection's file is still the one at the path
  /// (the binding's `prepare_db`): the decision does not `fstat` it again.
  pub file_checked: bool,
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
pub struct Settle {
  pub token: ReservationToken,
  /// The API key the record is for (`None`: a release, which names none).
  pub api_key_id: Option<String>,
  pub cost: ConsumptionCost,
  pub release: bool,
  pub now_ms: i64,
}

impl Settle {
  /// What the settle adds to each of the reservation's counters: `actual − reserved`,
  /// or — a release — `−reserved`.
  pub fn deltas(&self) -> impl FnOnce(&Reservation) -> Vec<BucketDelta> + Send + 'static {
    let (cost, release) = (self.cost, self.release);
    move |r: &Reservation| {
      if release {
        r.release_deltas()
      } else {
        r.settle_deltas(&cost)
      }
    }
  }
}

/// Whether records were left buffered: the caller arranges a flush on its event loop.
pub type Buffered = bool;

impl Engine {
  /// `enforceQuotaShare`.
  pub fn enforce(&'static self, call: EnforceCall) -> Step<Decision> {
    let started = call.started_ms.unwrap_or_else(|| self.monotonic_ms());
    if call.ids.is_empty() {
      let allow = Ok((EnforceOutcome::Allow { deprioritize: None }, None));
      return Step::Now(self.decided(allow, &call, started));
    }
    self.on_driver(move |driver, in_call| {
      let threshold = self.number(&SATURATION_THRESHOLD);
      let reserve = self.admission() == AdmissionMode::Reserve;
      // After an awaited driver choice the crossing's file check is old: check again.
      let call = EnforceCall {
        file_checked: call.file_checked && in_call,
        ..call
      };
      let outcome = driver.enforce(self, &call, threshold, reserve);
      outcome.map(move |outcome| self.decided(outcome, &call, started))
    })
  }

  /// `then` on the chosen driver, after the choice when one is in flight (see
  /// [`Engine::driver_for_call`]; a re-choice runs in the background). `then`'s second
  /// argument: whether it runs within this call (`false` after an awaited choice).
  fn on_driver<T: Send + 'static>(
    &'static self,
    then: impl FnOnce(Driver, bool) -> Step<T> + Send + 'static,
  ) -> Step<T> {
    match self.driver_for_call(&|choosing| self.in_background(choosing)) {
      Ok(driver) => then(driver, true),
      Err(choosing) => {
        Step::later(async move { then(choosing.resolve().await, false).resolve().await })
      }
    }
  }

  /// The decision of an outcome, counted in the metrics; a fault fails open.
  fn decided(&self, outcome: Enforced, call: &EnforceCall, started: f64) -> Decision {
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
        let ids = &call.ids;
        self.metrics.store_error(Operation::Enforce);
        self.faults.failed(
          &self.logs,
          Operation::Enforce,
          "quota enforcement failed; allowing the request",
          &err.to_string(),
          vec![
            ("apiKeyId", LogValue::Text(ids.api_key_id.clone())),
            ("connectionId", LogValue::Text(ids.connection_id.clone())),
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
    self.on_driver(move |driver, _| {
      let step = driver.record(self, &call);
      step.map(move |(written, buffered)| {
        match written {
          Written::Done => self.faults.succeeded(&self.logs, Operation::Record),
          Written::Nothing => {}
          Written::Failed(err) => self.record_failed(
            "recording quota consumption failed",
            &err,
            &call.ids.api_key_id,
          ),
        }
        buffered
      })
    })
  }

  fn record_failed(&self, msg: &str, err: &QuotaError, api_key_id: &str) {
    let api_key_id = Some(api_key_id).filter(|id| !id.is_empty());
    self.failed_in_glue(false, msg, &err.to_string(), api_key_id.map(str::to_string));
  }

  /// Settles (adds `actual − reserved` per counter) or releases (subtracts what was
  /// reserved) a reservation, at most once (docs/admission.md). A value that is not a
  /// reservation token is an error; one the store refuses is warned about and changes
  /// nothing; a store failure is a fault.
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
    Ok(self.on_driver(move |driver, _| {
      let step = driver.settle(self, &settle);
      step.map(move |result| {
        self.settled(result, &settle);
        false
      })
    }))
  }

  /// What a settle came to: done, refused (one warning, nothing changed) or a fault.
  fn settled(&self, result: Settled, settle: &Settle) {
    let msg = match settle.release {
      true => "releasing a quota reservation failed",
      false => "settling a quota reservation failed",
    };
    let who = settle.api_key_id.as_deref().unwrap_or_default();
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

  /// `QUOTA_RECORD_FLUSH_MS`: how long a buffered record may wait for its commit.
  pub(super) fn flush_age(&self) -> Duration {
    Duration::from_secs_f64(self.number(&RECORD_FLUSH_MS) / 1000.0)
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
      self.metrics.store_error(Operation::Record);
      self
        .faults
        .failed(&self.logs, Operation::Record, msg, error, context);
    }
  }

  /// A JS thread that buffered records is torn down: the buffer is committed if the
  /// database is open, to the file now at the path (records carried from a replaced file
  /// included, as the flush does); nothing is reported: no JavaScript runs any more.
  pub fn commit_at_teardown(&'static self) {
    let _ = self.commit_sqlite_buffer(false);
    if self.database.exiting.load(Ordering::Acquire) {
      let _ = self.close_db(); // a record after the exit's close reopened it: no WAL at rest
    }
  }

  /// Commits the SQLite buffer if the database is open, after looking the path up: a
  /// connection whose file was replaced is retired first, and records carried from it
  /// are committed to the file now at the path, opening it. `None`: nothing to commit.
  fn commit_sqlite_buffer(&'static self, automatic: bool) -> Option<Result<usize>> {
    self.database.recheck_file();
    let result = self
      .database
      .with_open(Access::Hot, |db| db.flush_pending(automatic));
    if self.database.carried_count() > 0 {
      return Some(self.with_hot_db(|db| db.flush_pending(automatic)));
    }
    result
  }

  /// Commits `recordConsumption`'s buffered records now: the error message (the records
  /// stay buffered, a fault logged once), or `None`. Opens the database only for records
  /// carried from a replaced file (docs/reliability.md, "Durability of records").
  pub fn flush(&'static self, automatic: bool) -> Option<String> {
    // Redis's buffer (docs/redis.md#write-behind), waited for; its faults are its own.
    let redis_error = self.flush_redis_blocking();
    let error = self
      .commit_sqlite_buffer(automatic)
      .and_then(|result| result.err())
      .map(|e| e.to_string());
    self.report_file_changes();
    match &error {
      Some(message) => {
        self.metrics.store_error(Operation::Record);
        // At exit there is no retry: the exit handler says what is left.
        if !self.database.exiting.load(Ordering::Acquire) {
          let buffered = self.pending_writes();
          self.faults.failed(
            &self.logs,
            Operation::Flush,
            "committing buffered quota records failed; they stay buffered and are retried",
            message,
            vec![("buffered", LogValue::Number(buffered as f64))],
          );
        }
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
    let max_age = self.flush_age();
    let mut wait = self
      .database
      .with_open(Access::Hot, |db| Ok(db.flush_wait(max_age)))
      .and_then(|r| r.ok())
      .flatten();
    if self.database.carried_count() > 0 {
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
    for change in self.database.take_file_changes() {
      let (message, counters, path, error) = match change {
        FileChange::Carried { counters, path } => (
          "the database file was replaced while quota records were buffered; they are committed to the file now at its path, not to the old one",
          counters,
          path,
          None,
        ),
        FileChange::Moved { counters, path } => (
          "the database path changed while quota records were buffered; they are committed to the file at the new path, not to the old one",
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
    let open = self
      .database
      .with_open(Access::Hot, |db| Ok(db.pending_count()))
      .and_then(|r| r.ok())
      .unwrap_or(0);
    self.report_file_changes();
    open + self.database.carried_count() + self.redis_writes.pending()
  }
}
