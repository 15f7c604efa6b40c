//! Atomic admission on SQLite (`QUOTA_ADMISSION=reserve`): the decision and the
//! reservation in one IMMEDIATE transaction, and settling a reservation.
//!
//! SQLite's write lock serializes every writer — threads and processes, the host's own
//! connection included — so the counters cannot change between the read and the add:
//! the default rule decides on the values just before the reservation, exactly.

use super::values::{exec, rows};
use super::{SqliteDb, StoreContext};
use crate::core::admission::{parse_dimension_key, Reservation, ReservationToken, ReservedEntry};
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
    reservation_id: String,
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
      let reservation = Reservation::new(reservation_id, request.api_key_id, writes, now_ms);
      db.add_floored(&reservation.api_key_id, &reservation.additions(), now_ms)?;
      db.keep_reservation(&reservation, now_ms)?;
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

  /// Keeps a reservation's state (in the caller's transaction).
  fn keep_reservation(&self, reservation: &Reservation, now_ms: i64) -> Result<()> {
    let mut stmt = self
      .conn
      .prepare_cached(INSERT_RESERVATION)
      .ctx("reserving")?;
    let expires_at = reservation.expires_at(now_ms);
    for entry in &reservation.entries {
      stmt
        .execute(params![
          reservation.id,
          reservation.api_key_id,
          entry.key.to_string(),
          entry.bucket,
          entry.amount,
          expires_at
        ])
        .ctx("reserving")?;
    }
    Ok(())
  }

  /// Settles or releases the reservation `token` names, at most once: in one IMMEDIATE
  /// transaction its state is read, checked (made for `api_key_id` when given, in the
  /// token's pool, not expired), deleted, and `deltas(state)` added to its buckets.
  /// A reservation that is unknown, used, expired or made for another key or pool is
  /// refused — `Ok(Err(why))` — and nothing changes (an expired one's rows are deleted).
  pub fn settle_reservation(
    &self,
    token: &ReservationToken,
    api_key_id: Option<&str>,
    deltas: impl FnOnce(&Reservation) -> Vec<crate::core::admission::BucketDelta>,
    now_ms: i64,
  ) -> Result<std::result::Result<(), &'static str>> {
    self.write_scope(|db| {
      let rows: Vec<(String, String, i64, f64, i64)> =
        rows(&db.conn, SELECT_RESERVATION, [&token.id], |row| {
          row.try_into()
        })
        .ctx("settling")?;
      let Some(first) = rows.first() else {
        return Ok(Err("unknown, already settled or released, or expired"));
      };
      let owner = first.0.clone();
      if api_key_id.is_some_and(|key| key != owner) {
        return Ok(Err("made for another API key"));
      }
      let mut entries = Vec::with_capacity(rows.len());
      for (_, dimension_key, bucket, amount, _) in &rows {
        let key = parse_dimension_key(dimension_key).ok_or_else(|| {
          crate::error::QuotaError::Store(format!("stored reservation {} is corrupt", token.id))
        })?;
        entries.push(ReservedEntry {
          key,
          bucket: *bucket,
          amount: *amount,
        });
      }
      let reservation = Reservation {
        id: token.id.clone(),
        api_key_id: owner,
        entries,
      };
      if reservation.pool_id() != token.pool_id {
        return Ok(Err("made in another pool"));
      }
      let sql = "DELETE FROM quota_reservations WHERE id = ?1";
      exec(&db.conn, sql, [&token.id]).ctx("settling")?;
      if rows.iter().any(|row| row.4 < now_ms) {
        return Ok(Err("unknown, already settled or released, or expired"));
      }
      db.add_floored(&reservation.api_key_id, &deltas(&reservation), now_ms)?;
      Ok(Ok(()))
    })
  }
}

const INSERT_RESERVATION: &str = "
  INSERT INTO quota_reservations (id, api_key_id, dimension_key, bucket_index, amount, expires_at)
  VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

const SELECT_RESERVATION: &str = "
  SELECT api_key_id, dimension_key, bucket_index, amount, expires_at
  FROM quota_reservations WHERE id = ?1";

#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::dimensions::{QuotaUnit, QuotaWindow};
  use crate::store::sqlite::temp_db;
  use crate::store::sqlite::values::one;

  const NOW: i64 = 1_000 * 3_600_000 + 5;

  fn reserve(db: &SqliteDb, id: &str, amount: f64) -> (Reservation, ReservationToken) {
    let key = DimensionKey::new("p", QuotaUnit::Tokens, QuotaWindow::Hourly);
    let r = Reservation::new(id.repeat(32), "k", vec![(key, amount)], NOW);
    db.write_scope(|db| {
      db.add_floored("k", &r.additions(), NOW)?;
      db.keep_reservation(&r, NOW)
    })
    .unwrap();
    let token = ReservationToken::parse(&r.token(), "reservation").unwrap();
    (r, token)
  }

  fn tokens(db: &SqliteDb) -> f64 {
    let sql = "SELECT coalesce(sum(consumed), 0) FROM quota_consumption WHERE api_key_id = 'k'";
    one(db.connection(), sql, []).unwrap()
  }

  /// Issue 15 item 4 on the store: once, bound to its key, gone after expiry or GC.
  #[test]
  fn a_reservation_settles_once_for_its_key_and_expires() {
    let (_dir, db) = temp_db();
    let release = |r: &Reservation| r.release_deltas();
    let (r, token) = reserve(&db, "a", 5.0);
    assert_eq!(tokens(&db), 5.0);
    assert_eq!(
      db.settle_reservation(&token, Some("other"), release, NOW)
        .unwrap(),
      Err("made for another API key")
    );
    assert_eq!(
      db.settle_reservation(&token, Some("k"), release, NOW)
        .unwrap(),
      Ok(())
    );
    assert_eq!(tokens(&db), 0.0);
    assert!(db
      .settle_reservation(&token, Some("k"), release, NOW)
      .unwrap()
      .is_err());
    // Past its expiry: refused, its rows deleted, the counters left.
    let (_, token) = reserve(&db, "b", 5.0);
    assert!(db
      .settle_reservation(&token, None, release, r.expires_at(NOW) + 1)
      .unwrap()
      .is_err());
    assert_eq!(tokens(&db), 5.0);
    // The retention sweep forgets expired reservations.
    let (r, token) = reserve(&db, "c", 1.0);
    db.gc_reservations(r.expires_at(NOW) + 1).unwrap();
    assert!(db
      .settle_reservation(&token, None, release, NOW)
      .unwrap()
      .is_err());
    let count: i64 = one(
      db.connection(),
      "SELECT count(*) FROM quota_reservations",
      [],
    )
    .unwrap();
    assert_eq!(count, 0);
  }
}
