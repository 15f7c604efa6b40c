//! Atomic admission on SQLite (`QUOTA_ADMISSION=reserve`): the decision and the
//! reservation in one IMMEDIATE transaction, and settling a reservation.
//!
//! SQLite's write lock serializes every writer — threads and processes, the host's own
//! connection included — so the counters cannot change between the read and the add:
//! the default rule decides on the values just before the reservation, exactly.

use super::{SqliteDb, StoreContext};
use crate::core::admission::Reservation;
use crate::core::dimensions::DimensionKey;
use crate::core::enforce::{
  plan_enforce, planned_writes, ConsumptionCost, EnforceOutcome, EnforceStart, QuotaRequest,
  QuotaSource, SaturationLookup,
};
use crate::error::Result;
use crate::store::validate;
use rusqlite::params;

/// An upsert adding a delta of any sign, never leaving the bucket below 0 nor above
/// `COUNTER_MAX` (1e15).
const UPSERT_FLOORED: &str = "
  INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at)
  VALUES (?1, ?2, ?3, min(max(?4, 0), 1e15), ?5)
  ON CONFLICT (api_key_id, dimension_key, bucket_index) DO UPDATE SET
    consumed = min(max(coalesce(consumed, 0) + ?4, 0), 1e15),
    updated_at = excluded.updated_at";

impl SqliteDb {
  /// `enforceQuotaShare` in reserve mode: metadata first in a read transaction (no pool, no
  /// limit, unknown saturation: decided without the write lock), then, in one IMMEDIATE
  /// transaction, the counters, the default decision on them and — on an allow — the
  /// estimated cost added to every counter record would write. The reservation is
  /// returned with the allow.
  pub fn enforce_reserving(
    &self,
    saturation: &dyn SaturationLookup,
    request: &QuotaRequest<'_>,
    saturation_threshold: f64,
    estimate: &ConsumptionCost,
    now_ms: i64,
  ) -> Result<(EnforceOutcome, Option<Reservation>)> {
    let start =
      self.read_scope(|db| plan_enforce(db, saturation, request, saturation_threshold, now_ms))?;
    if let EnforceStart::Done(outcome) = start {
      return Ok((outcome, None));
    }
    self.write_scope(|db| {
      let plan = match plan_enforce(db, saturation, request, saturation_threshold, now_ms)? {
        EnforceStart::Done(outcome) => return Ok((outcome, None)),
        EnforceStart::Read(plan) => plan,
      };
      let values = db.read_counters(request.api_key_id, plan.reads())?;
      let outcome = plan.decide(request, &values);
      if !matches!(outcome, EnforceOutcome::Allow { .. }) {
        return Ok((outcome, None));
      }
      let writes = planned_writes(db, request, estimate)?;
      if writes.is_empty() {
        return Ok((outcome, None));
      }
      let reservation = Reservation::new(request.api_key_id, writes, now_ms);
      db.add_floored(&reservation.api_key_id, &reservation.additions(), now_ms)?;
      Ok((outcome, Some(reservation)))
    })
  }

  /// Adds each `(dimension key, bucket, delta)` of one API key — deltas of any sign, each
  /// bucket floored at 0 — in one IMMEDIATE transaction (or the caller's).
  pub fn add_floored(
    &self,
    api_key_id: &str,
    deltas: &[(DimensionKey, i64, f64)],
    now_ms: i64,
  ) -> Result<()> {
    validate::non_empty(api_key_id, "apiKeyId")?;
    for (index, (_, _, delta)) in deltas.iter().enumerate() {
      validate::finite(*delta, &format!("deltas[{index}]"))?;
    }
    if deltas.is_empty() {
      return Ok(());
    }
    self.write_scope(|db| {
      let mut stmt = db.conn.prepare_cached(UPSERT_FLOORED).ctx("settling")?;
      for (key, bucket, delta) in deltas {
        stmt
          .execute(params![api_key_id, key.to_string(), bucket, delta, now_ms])
          .ctx("settling")?;
      }
      Ok(())
    })
  }
}
