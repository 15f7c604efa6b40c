//! The hot path's transactions: one lock/unlock pair per enforce however many statements
//! it runs (counted, not timed), rows written by another connection seen by the next
//! scope, and a schema change by another connection migrated even though the freshness
//! check now runs inside the scope's transaction.

mod store_support;

use omniroute_quota_engine::core::enforce::{enforce, EnforceOutcome};
use omniroute_quota_engine::store::sqlite::locks;
use store_support::{
  enforce_setup as setup, host_conn, host_put, request, serial, temp_db, NoSaturation, H, NOW,
};

#[test]
fn an_enforce_takes_one_lock_pair_whatever_it_reads() {
  let _serial = serial();
  let (_dir, _path, db) = temp_db();
  setup(&db, 1500.0);
  // Warm the metadata cache and the statement cache.
  db.read_scope(|db| enforce(db, &NoSaturation, &request(), 0.5, NOW))
    .unwrap();
  let before = locks::lock_calls();
  let outcome = db
    .read_scope(|db| enforce(db, &NoSaturation, &request(), 0.5, NOW))
    .unwrap();
  let calls = locks::lock_calls() - before;
  assert_eq!(
    outcome,
    EnforceOutcome::Allow {
      deprioritize: Some(false)
    }
  );
  // Two dimensions: four counter reads, plus the metadata lookups, in one transaction.
  assert!(
    calls <= 2,
    "one read-lock and its release expected, saw {calls} lock calls"
  );
}

#[test]
fn a_scope_sees_what_another_connection_committed_before_it() {
  let _serial = serial();
  let (_dir, path, db) = temp_db();
  let pool_id = setup(&db, 10.0);
  db.read_scope(|db| enforce(db, &NoSaturation, &request(), 0.5, NOW))
    .unwrap();
  let host = host_conn(&path);
  host_put(
    &host,
    "k",
    &format!("{pool_id}:requests:hourly"),
    NOW / H,
    10.0,
  );
  let outcome = db
    .read_scope(|db| enforce(db, &NoSaturation, &request(), 0.5, NOW))
    .unwrap();
  assert!(
    matches!(outcome, EnforceOutcome::Block { .. }),
    "{outcome:?}"
  );
  // A plan change by the host is seen by the next scope too (metadata cache invalidated).
  host
    .execute(
      "UPDATE provider_plans SET dimensions_json = '[{\"unit\":\"requests\",\"window\":\"hourly\",\"limit\":100}]' WHERE connection_id = 'c'",
      [],
    )
    .unwrap();
  let outcome = db
    .read_scope(|db| enforce(db, &NoSaturation, &request(), 0.5, NOW))
    .unwrap();
  assert_eq!(
    outcome,
    EnforceOutcome::Allow {
      deprioritize: Some(false)
    }
  );
}

#[test]
fn a_trigger_dropped_by_another_connection_is_restored_by_the_next_scope() {
  let _serial = serial();
  let (_dir, path, db) = temp_db();
  let pool_id = setup(&db, 1500.0);
  db.read_scope(|db| enforce(db, &NoSaturation, &request(), 0.5, NOW))
    .unwrap();
  let host = host_conn(&path);
  let triggers = |conn: &rusqlite::Connection| -> i64 {
    conn
      .query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'quota_consumption'",
        [],
        |r| r.get(0),
      )
      .unwrap()
  };
  let before = triggers(&host);
  let name: String = host
    .query_row(
      "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'quota_consumption' ORDER BY name LIMIT 1",
      [],
      |r| r.get(0),
    )
    .unwrap();
  host
    .execute_batch(&format!("DROP TRIGGER \"{name}\""))
    .unwrap();
  assert_eq!(triggers(&host), before - 1);
  db.read_scope(|db| enforce(db, &NoSaturation, &request(), 0.5, NOW))
    .unwrap();
  assert_eq!(
    triggers(&host),
    before,
    "the scope migrated the schema outside its transaction"
  );
  // And the totals are exact again for writes after the repair.
  host
    .execute(
      "INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES ('k2', ?1, ?2, 7, 0)",
      rusqlite::params![format!("{pool_id}:requests:hourly"), NOW / H],
    )
    .unwrap();
  let (curr, _) = db
    .sum_pool_dimension(&format!("{pool_id}:requests:hourly"), NOW / H)
    .unwrap();
  assert_eq!(curr, 7.0);
}
