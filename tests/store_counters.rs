//! The SQLite counters (docs/contract.md §2, §4, §5): sums, bucket rotation and decay with
//! injected time, clear, pool totals against brute-force sums with a second writer, the
//! host's `quotaConsumption` functions, retention, and exactness under concurrency.

mod store_support;

use omniroute_quota_engine::core::dimensions::{QuotaUnit, QuotaWindow};
use omniroute_quota_engine::error::{ArgErrorKind, QuotaError};
use omniroute_quota_engine::store::SqliteDb;
use rusqlite::params;
use std::sync::{Arc, Mutex};
use store_support::*;
use QuotaUnit::{Requests, Tokens, Usd};
use QuotaWindow::{Daily, Hourly};

fn range_field(err: QuotaError) -> String {
  match err {
    QuotaError::InvalidArg { kind, field, .. } => {
      assert_eq!(kind, ArgErrorKind::Range);
      field
    }
    other => panic!("expected an invalid-argument error, got {other:?}"),
  }
}

fn row_count(db: &SqliteDb) -> i64 {
  db.connection()
    .query_row("SELECT COUNT(*) FROM quota_consumption", [], |r| r.get(0))
    .unwrap()
}

#[test]
fn consume_sums_into_the_current_bucket() {
  let (_dir, _path, db) = temp_db();
  let k = key("pool-a", Tokens, Hourly);
  let t = 1000 * H + 10;
  assert_eq!(db.consume("key-1", &k, 5.0, t).unwrap(), 5.0);
  assert_eq!(db.consume("key-1", &k, 7.0, t + 1).unwrap(), 12.0);
  assert_eq!(db.peek("key-1", &k, t + 2).unwrap(), 12.0);
  // Another key and another dimension are separate counters.
  assert_eq!(db.consume("key-2", &k, 1.0, t).unwrap(), 1.0);
  assert_eq!(
    db.peek("key-1", &key("pool-a", Requests, Hourly), t)
      .unwrap(),
    0.0
  );
  assert_eq!(db.pool_consumed_total(&k, t).unwrap(), 13.0);
  assert_eq!(
    db.get_bucket("key-1", "pool-a:tokens:hourly", 1000)
      .unwrap(),
    12.0
  );
  // updated_at is the injected time of the last write.
  let updated: i64 = db
    .connection()
    .query_row(
      "SELECT updated_at FROM quota_consumption WHERE api_key_id = 'key-1'",
      [],
      |r| r.get(0),
    )
    .unwrap();
  assert_eq!(updated, t + 1);
}

#[test]
fn buckets_rotate_and_the_previous_one_decays() {
  let (_dir, _path, db) = temp_db();
  let k = key("p", Requests, Hourly);
  let start = 500 * H;
  db.consume("k", &k, 100.0, start + H / 4).unwrap();
  // Next bucket, at its very start: all of prev counts.
  assert_eq!(db.peek("k", &k, start + H).unwrap(), 100.0);
  // A quarter in: 75 % of prev, plus what lands in curr.
  assert_eq!(db.consume("k", &k, 10.0, start + H + H / 4).unwrap(), 85.0);
  assert_eq!(db.peek("k", &k, start + H + H / 2).unwrap(), 60.0);
  assert_eq!(db.pool_consumed_total(&k, start + H + H / 2).unwrap(), 60.0);
  // Two buckets later the first is gone; the second now decays.
  assert_eq!(db.peek("k", &k, start + 2 * H + H / 2).unwrap(), 5.0);
  assert_eq!(db.peek("k", &k, start + 3 * H).unwrap(), 0.0);
  assert_eq!(
    db.get_pair("k", "p:requests:hourly", 501).unwrap(),
    (10.0, 100.0)
  );
  assert_eq!(
    db.sum_pool_dimension("p:requests:hourly", 501).unwrap(),
    (10.0, 100.0)
  );
  // Each window keeps its own buckets.
  let daily = key("p", Requests, Daily);
  db.consume("k", &daily, 3.0, start).unwrap();
  assert_eq!(db.peek("k", &daily, start + 2 * H).unwrap(), 3.0);
}

#[test]
fn clear_zeroes_the_key_and_the_pool_total() {
  let (_dir, _path, db) = temp_db();
  let k = key("p", Tokens, Hourly);
  db.consume("a", &k, 10.0, 7 * H).unwrap();
  db.consume("a", &k, 20.0, 8 * H).unwrap();
  db.consume("b", &k, 5.0, 8 * H).unwrap();
  assert_eq!(db.pool_consumed_total(&k, 8 * H).unwrap(), 35.0);
  db.clear("a", &k).unwrap();
  assert_eq!(db.peek("a", &k, 8 * H).unwrap(), 0.0);
  assert_eq!(db.pool_consumed_total(&k, 8 * H).unwrap(), 5.0);
  assert_eq!(db.peek("b", &k, 8 * H).unwrap(), 5.0);
  assert_totals_exact(db.connection(), 0.0);
}

#[test]
fn invalid_input_names_the_field_and_writes_nothing() {
  let (_dir, _path, db) = temp_db();
  let k = key("p", Tokens, Hourly);
  assert_eq!(
    range_field(db.consume("", &k, 1.0, 0).unwrap_err()),
    "apiKeyId"
  );
  for bad in [-1.0, f64::NAN, f64::INFINITY] {
    assert_eq!(
      range_field(db.consume("a", &k, bad, 0).unwrap_err()),
      "cost"
    );
  }
  assert_eq!(
    range_field(
      db.consume("a", &key("", Tokens, Hourly), 1.0, 0)
        .unwrap_err()
    ),
    "dim.poolId"
  );
  assert_eq!(
    range_field(
      db.increment_bucket("a", "p:tokens:hourly", 1, f64::NAN, 0)
        .unwrap_err()
    ),
    "delta"
  );
  assert_eq!(row_count(&db), 0);
  // Zero is a valid cost.
  assert_eq!(db.consume("a", &k, 0.0, 0).unwrap(), 0.0);
}

#[test]
fn per_key_effective_lists_every_key() {
  let (_dir, _path, db) = temp_db();
  let k = key("p", Tokens, Hourly);
  db.consume("b", &k, 4.0, 10 * H).unwrap();
  db.consume("a", &k, 8.0, 11 * H).unwrap();
  db.consume("a", &k, 2.0, 11 * H + H / 2).unwrap();
  db.consume("c", &k, 1.0, 3 * H).unwrap(); // too old to count
  let got = db.per_key_effective(&k, 11 * H + H / 2).unwrap();
  assert_eq!(got, vec![("a".to_string(), 10.0), ("b".to_string(), 2.0)]);
}

#[test]
fn pool_totals_match_brute_force_with_a_second_writer() {
  let (_dir, path, db) = temp_db();
  let host = host_conn(&path);
  let k = key("pool", Tokens, Hourly);
  let dk = k.to_string();
  let t = 40 * H;
  db.consume("e1", &k, 3.0, t).unwrap();
  db.consume("e2", &k, 4.5, t).unwrap();
  // The host's own upsert, a plain insert, an insert into another bucket.
  let upsert =
    "INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at)
    VALUES (?1, ?2, ?3, ?4, ?5)
    ON CONFLICT (api_key_id, dimension_key, bucket_index)
    DO UPDATE SET consumed = consumed + excluded.consumed, updated_at = excluded.updated_at";
  host
    .execute(upsert, params!["h1", dk, 40, 10.0, t])
    .unwrap();
  host.execute(upsert, params!["e1", dk, 40, 1.0, t]).unwrap();
  host
    .execute(
      "INSERT INTO quota_consumption VALUES ('h2', ?1, 39, 20.0, ?2)",
      params![dk, t - H],
    )
    .unwrap();
  assert_eq!(db.sum_pool_dimension(&dk, 40).unwrap(), (18.5, 20.0));
  assert_eq!(brute_sum(&host, &dk, 40), 18.5);
  assert_eq!(db.pool_consumed_total(&k, t + H / 2).unwrap(), 18.5 + 10.0);
  // An update of consumed, a row moved to another bucket and another key, deletes.
  host
    .execute(
      "UPDATE quota_consumption SET consumed = 2.0 WHERE api_key_id = 'h1'",
      [],
    )
    .unwrap();
  host
    .execute(
      "UPDATE quota_consumption SET bucket_index = 41 WHERE api_key_id = 'e2'",
      [],
    )
    .unwrap();
  host
    .execute(
      "UPDATE quota_consumption SET dimension_key = 'other:tokens:hourly' WHERE api_key_id = 'h2'",
      [],
    )
    .unwrap();
  assert_eq!(db.sum_pool_dimension(&dk, 40).unwrap(), (6.0, 0.0));
  assert_eq!(db.sum_pool_dimension(&dk, 41).unwrap(), (4.5, 6.0));
  assert_eq!(
    db.sum_pool_dimension("other:tokens:hourly", 39).unwrap(),
    (20.0, 0.0)
  );
  host
    .execute("DELETE FROM quota_consumption WHERE api_key_id = 'e1'", [])
    .unwrap();
  assert_eq!(db.sum_pool_dimension(&dk, 40).unwrap(), (2.0, 0.0));
  assert_totals_exact(&host, 0.0);
  // A mixed random-ish workload from both sides stays exact (integers: no float drift).
  for i in 0..300i64 {
    let api = format!("k{}", i % 7);
    let bucket = 40 + i % 3;
    if i % 2 == 0 {
      db.increment_bucket(&api, &dk, bucket, (i % 5) as f64, t)
        .unwrap();
    } else {
      host
        .execute(upsert, params![api, dk, bucket, (i % 11) as f64, t])
        .unwrap();
    }
    if i % 37 == 0 {
      host
        .execute(
          "DELETE FROM quota_consumption WHERE api_key_id = ?1 AND bucket_index = ?2",
          params![api, bucket],
        )
        .unwrap();
    }
    if i % 53 == 0 {
      host
        .execute(
          "UPDATE quota_consumption SET bucket_index = bucket_index + 1 WHERE api_key_id = ?1 AND bucket_index = 42",
          params![api],
        )
        .unwrap_or(0);
    }
  }
  assert_totals_exact(&host, 0.0);
  for bucket in 40..=43 {
    assert_eq!(
      db.sum_pool_dimension(&dk, bucket).unwrap().0,
      brute_sum(&host, &dk, bucket)
    );
  }
  // Emptied buckets leave no totals row behind.
  host.execute("DELETE FROM quota_consumption", []).unwrap();
  assert!(totals(&host).is_empty());
  assert_eq!(db.pool_consumed_total(&k, t).unwrap(), 0.0);
}

#[test]
fn fractional_drift_is_reconciled_and_replace_is_repaired() {
  let (_dir, path, db) = temp_db();
  let host = host_conn(&path);
  let k = key("p", Usd, Hourly);
  let dk = k.to_string();
  for i in 0..200 {
    db.consume(
      &format!("k{}", i % 9),
      &k,
      0.1 + f64::from(i) * 0.013,
      5 * H,
    )
    .unwrap();
  }
  assert_totals_exact(&host, 1e-9);
  // INSERT OR REPLACE from a connection without recursive_triggers skips the delete
  // trigger of the replaced row: the total counts it twice until reconciled.
  host
    .execute(
      "INSERT OR REPLACE INTO quota_consumption VALUES ('k1', ?1, 5, 1.0, 0)",
      params![dk],
    )
    .unwrap();
  let (total, _) = db.sum_pool_dimension(&dk, 5).unwrap();
  assert!((total - brute_sum(&host, &dk, 5)).abs() > 1.0);
  let fixed = db.reconcile_totals().unwrap();
  assert!(fixed >= 1);
  assert_totals_exact(&host, 0.0);
  assert_eq!(
    db.sum_pool_dimension(&dk, 5).unwrap().0,
    brute_sum(&host, &dk, 5)
  );
  // Reconciling again changes nothing; orphan totals rows are removed.
  assert_eq!(db.reconcile_totals().unwrap(), 0);
  host.execute_batch("DROP TRIGGER quota_consumption_totals_ad; DELETE FROM quota_consumption WHERE api_key_id = 'k2';").unwrap();
  // The dropped trigger is noticed (schema change) and recreated by the next lookup,
  // rebuilding the totals in the same transaction.
  let _ = db.sum_pool_dimension(&dk, 5).unwrap();
  assert_totals_exact(&host, 0.0);
  assert!(schema_names(&host, "trigger").contains(&"quota_consumption_totals_ad".to_string()));
}

#[test]
fn list_consumption_for_pool_is_newest_first_and_prefix_exact() {
  let (_dir, _path, db) = temp_db();
  for (i, dk) in [
    "pool_1:tokens:5h",
    "pool_1:model:gpt-4o:tokens:hourly",
    "poolX1:tokens:5h",
    "POOL_1:tokens:5h",
    "pool_1x:tokens:5h",
    "pool_1:requests:daily",
  ]
  .iter()
  .enumerate()
  {
    db.increment_bucket("k", dk, 1, 1.0, 100 + i as i64)
      .unwrap();
  }
  let rows = db.list_consumption_for_pool("pool_1", 50).unwrap();
  let keys: Vec<&str> = rows.iter().map(|r| r.dimension_key.as_str()).collect();
  assert_eq!(
    keys,
    [
      "pool_1:requests:daily",
      "pool_1:model:gpt-4o:tokens:hourly",
      "pool_1:tokens:5h"
    ]
  );
  assert_eq!(
    (rows[0].unit.as_str(), rows[0].window.as_str()),
    ("requests", "daily")
  );
  assert_eq!(
    (rows[1].unit.as_str(), rows[1].window.as_str()),
    ("tokens", "hourly")
  );
  assert_eq!(rows[0].updated_at, 105);
  assert_eq!(rows[0].bucket_index, 1);
  assert_eq!(rows[0].consumed, 1.0);
  assert_eq!(db.list_consumption_for_pool("pool_1", 0).unwrap().len(), 1);
  assert_eq!(db.list_consumption_for_pool("pool_1", -5).unwrap().len(), 1);
  assert_eq!(db.list_consumption_for_pool("pool%", 500).unwrap().len(), 0);
  for i in 0..600 {
    db.increment_bucket(&format!("k{i}"), "big:tokens:5h", 1, 1.0, i)
      .unwrap();
  }
  let big = db.list_consumption_for_pool("big", 10_000).unwrap();
  assert_eq!(big.len(), 500);
  assert_eq!(big[0].updated_at, 599);
}

#[test]
fn gc_deletes_strictly_older_rows_and_keeps_totals_exact() {
  let (_dir, _path, db) = temp_db();
  let now = 100 * DAY;
  for (i, age_days) in [0, 1, 13, 14, 15, 30].iter().enumerate() {
    db.increment_bucket(
      &format!("k{i}"),
      "p:tokens:daily",
      99,
      1.0,
      now - age_days * DAY,
    )
    .unwrap();
  }
  assert_eq!(db.gc_older_than(now - 14 * DAY).unwrap(), 2);
  assert_eq!(row_count(&db), 4);
  assert_eq!(db.gc_consumption(1.0, now).unwrap(), 2);
  assert_eq!(row_count(&db), 2);
  assert_eq!(db.sum_pool_dimension("p:tokens:daily", 99).unwrap().0, 2.0);
  assert_totals_exact(db.connection(), 0.0);
  assert_eq!(
    range_field(db.gc_consumption(0.0, now).unwrap_err()),
    "retentionDays"
  );
  // Chunked deletes: more rows than one chunk.
  for i in 0..2500 {
    db.increment_bucket(&format!("old{i}"), "p:tokens:daily", 1, 1.0, 5)
      .unwrap();
  }
  assert_eq!(db.gc_older_than(6).unwrap(), 2500);
  assert_totals_exact(db.connection(), 0.0);
}

#[test]
fn eight_threads_consume_exactly() {
  let (_dir, path, db) = temp_db();
  let db = Arc::new(Mutex::new(db));
  let k = key("p", Requests, Daily);
  let t = 20 * DAY + 5;
  let threads: Vec<_> = (0..8)
    .map(|_| {
      let db = Arc::clone(&db);
      let k = k.clone();
      std::thread::spawn(move || {
        let mut last = 0.0;
        for _ in 0..500 {
          let now = db.lock().unwrap().consume("shared", &k, 1.0, t).unwrap();
          assert!(now > last, "the returned value only grows");
          last = now;
        }
      })
    })
    .collect();
  for t in threads {
    t.join().unwrap();
  }
  let db = db.lock().unwrap();
  assert_eq!(db.peek("shared", &k, t).unwrap(), 4000.0);
  assert_eq!(db.pool_consumed_total(&k, t).unwrap(), 4000.0);
  assert_totals_exact(&host_conn(&path), 0.0);
}

#[test]
fn engine_and_host_connections_interleave_exactly() {
  let (_dir, path, db) = temp_db();
  let db = Arc::new(Mutex::new(db));
  let dk = "p:tokens:hourly";
  let k = key("p", Tokens, Hourly);
  let t = 9 * H;
  let mut handles = Vec::new();
  for _ in 0..2 {
    let db = Arc::clone(&db);
    let k = k.clone();
    handles.push(std::thread::spawn(move || {
      for _ in 0..150 {
        db.lock().unwrap().consume("shared", &k, 2.0, t).unwrap();
      }
    }));
  }
  for _ in 0..2 {
    let path = path.clone();
    handles.push(std::thread::spawn(move || {
      let host = host_conn(&path);
      for _ in 0..150 {
        host
          .execute(
            "INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at)
             VALUES ('shared', ?1, 9, 3.0, ?2)
             ON CONFLICT (api_key_id, dimension_key, bucket_index)
             DO UPDATE SET consumed = consumed + excluded.consumed",
            params![dk, t],
          )
          .unwrap();
      }
    }));
  }
  for h in handles {
    h.join().unwrap();
  }
  let db = db.lock().unwrap();
  let expected = 2.0 * 300.0 + 3.0 * 300.0;
  assert_eq!(db.peek("shared", &k, t).unwrap(), expected);
  assert_eq!(db.pool_consumed_total(&k, t).unwrap(), expected);
}

// ---- finite counters (docs/reliability.md, "Finite counters") -------------------------

const CAP: f64 = omniroute_quota_engine::store::validate::COUNTER_MAX;

#[test]
fn huge_amounts_saturate_at_counter_max_and_never_become_infinite() {
  let (_dir, _path, db) = temp_db();
  let k = key("huge", Tokens, Hourly);
  let t = 1000 * H + 10;
  // consume(…, 1e308) twice: Infinity before the cap.
  assert_eq!(db.consume("a", &k, 1e308, t).unwrap(), CAP);
  assert_eq!(db.consume("a", &k, 1e308, t).unwrap(), CAP);
  assert_eq!(db.consume("a", &k, f64::MAX, t).unwrap(), CAP);
  // recordConsumption's path: buffered, then flushed; and write-through.
  let writes = vec![(k.clone(), f64::MAX)];
  db.record_writes("b", &writes, t, std::time::Duration::from_secs(60))
    .unwrap();
  db.record_writes("b", &writes, t, std::time::Duration::from_secs(60))
    .unwrap();
  assert_eq!(db.peek("b", &k, t).unwrap(), CAP);
  assert_eq!(db.pool_consumed_total(&k, t).unwrap(), 2.0 * CAP);
  db.flush_pending(false).unwrap();
  db.record_writes("b", &writes, t, std::time::Duration::ZERO)
    .unwrap();
  db.consume_many("c", &writes, t).unwrap();
  db.consume_many("c", &writes, t).unwrap();
  for id in ["a", "b", "c"] {
    assert_eq!(db.get_bucket(id, "huge:tokens:hourly", 1000).unwrap(), CAP);
  }
  let total = db.pool_consumed_total(&k, t).unwrap();
  assert!(total.is_finite() && total == 3.0 * CAP, "{total}");
  let stored: f64 = db
    .connection()
    .query_row("SELECT max(consumed) FROM quota_consumption", [], |r| {
      r.get(0)
    })
    .unwrap();
  assert_eq!(stored, CAP);
  assert_totals_exact(db.connection(), 0.0);
  // clear and GC work and leave nothing behind.
  db.clear("a", &k).unwrap();
  assert_eq!(db.gc_older_than(t + 1).unwrap(), 2);
  assert!(totals(db.connection()).is_empty());
}

#[test]
fn poisoned_rows_from_an_older_version_can_be_cleared_collected_and_repaired() {
  let (_dir, path, db) = temp_db();
  let host = host_conn(&path);
  let k = key("poison", Tokens, Hourly);
  let dk = k.to_string();
  let poison = |ids: &[&str], updated_at: i64| {
    for id in ids {
      // 9e999 is SQLite's +Infinity: what an older version stored for 1.7e308 + 1.7e308.
      host
        .execute(
          "INSERT INTO quota_consumption VALUES (?1, ?2, 7, 9e999, ?3)",
          params![id, dk, updated_at],
        )
        .unwrap();
    }
  };
  // clear of one of two Infinity rows computed Inf − Inf = NaN → NOT NULL failure.
  poison(&["a", "b"], 5);
  db.clear("a", &k).unwrap();
  let (curr, _) = db.sum_pool_dimension(&dk, 7).unwrap();
  assert!(curr.is_finite(), "{curr}");
  db.clear("b", &k).unwrap();
  assert!(totals(db.connection()).is_empty());
  // The retention sweep too.
  poison(&["a", "b"], 5);
  assert_eq!(db.gc_older_than(6).unwrap(), 2);
  assert!(totals(db.connection()).is_empty());
  // Repair: Infinity → the cap, negative → 0, the totals recomputed.
  poison(&["a", "b"], 5);
  host
    .execute(
      "INSERT INTO quota_consumption VALUES ('c', ?1, 7, -39, 5)",
      params![dk],
    )
    .unwrap();
  let found = db.repair_counters().unwrap();
  assert_eq!((found.rows, found.totals), (3, 0));
  assert_eq!(db.get_bucket("a", &dk, 7).unwrap(), CAP);
  assert_eq!(db.get_bucket("c", &dk, 7).unwrap(), 0.0);
  assert_eq!(db.sum_pool_dimension(&dk, 7).unwrap(), (2.0 * CAP, 0.0));
  assert_totals_exact(&host, 0.0);
  let again = db.repair_counters().unwrap();
  assert_eq!((again.rows, again.totals), (0, 0));
  // A poisoned totals row (an older version's Infinity) is recomputed too.
  host
    .execute("UPDATE quota_consumption_totals SET consumed = 9e999", [])
    .unwrap();
  assert_eq!(db.repair_counters().unwrap().totals, 1);
  assert_totals_exact(&host, 0.0);
}

#[test]
fn negative_rows_another_writer_left_read_as_zero_and_the_next_write_starts_from_zero() {
  let (_dir, path, db) = temp_db();
  let host = host_conn(&path);
  let k = key("negative", Tokens, Hourly);
  let dk = k.to_string();
  let t = 7 * H + 10;
  // -9e999 is SQLite's -Infinity; -39 what the old incrementBucket could leave.
  for (id, value) in [("a", "-39"), ("b", "-9e999"), ("c", "-1e308"), ("d", "-2")] {
    host
      .execute(
        &format!("INSERT INTO quota_consumption VALUES (?1, ?2, 7, {value}, 5)"),
        params![id, dk],
      )
      .unwrap();
  }
  for id in ["a", "b", "c"] {
    assert_eq!(db.peek(id, &k, t).unwrap(), 0.0, "{id}");
    assert_eq!(db.get_bucket(id, &dk, 7).unwrap(), 0.0, "{id}");
  }
  assert_eq!(db.per_key_effective(&k, t).unwrap().len(), 4);
  assert!(db
    .per_key_effective(&k, t)
    .unwrap()
    .iter()
    .all(|(_, v)| *v == 0.0));
  // Each write path heals the row: consume, incrementBucket, a buffered record's flush.
  assert_eq!(db.consume("a", &k, 1.0, t).unwrap(), 1.0);
  db.increment_bucket("b", &dk, 7, 2.0, t).unwrap();
  db.record_writes(
    "c",
    &[(k.clone(), 3.0)],
    t,
    std::time::Duration::from_secs(60),
  )
  .unwrap();
  db.flush_pending(false).unwrap();
  for (id, expected) in [("a", 1.0), ("b", 2.0), ("c", 3.0)] {
    let stored: f64 = host
      .query_row(
        "SELECT consumed FROM quota_consumption WHERE api_key_id = ?1",
        [id],
        |r| r.get(0),
      )
      .unwrap();
    assert_eq!(stored, expected, "{id}");
  }
  // The pool total follows each row; the one negative row left still reads as 0.
  assert_totals_exact(&host, 0.0);
  assert_eq!(db.sum_pool_dimension(&dk, 7).unwrap().0, 6.0 - 2.0);
  assert_eq!(db.peek("d", &k, t).unwrap(), 0.0);
}

#[test]
fn increment_bucket_rejects_negative_and_non_finite_deltas() {
  let (_dir, _path, db) = temp_db();
  db.increment_bucket("a", "p:tokens:hourly", 1, 40.0, 0)
    .unwrap();
  for bad in [-1.0, -39.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
    assert_eq!(
      range_field(
        db.increment_bucket("a", "p:tokens:hourly", 1, bad, 0)
          .unwrap_err()
      ),
      "delta"
    );
  }
  assert_eq!(db.get_bucket("a", "p:tokens:hourly", 1).unwrap(), 40.0);
  assert_eq!(
    db.sum_pool_dimension("p:tokens:hourly", 1).unwrap(),
    (40.0, 0.0)
  );
  // A huge delta saturates.
  db.increment_bucket("a", "p:tokens:hourly", 1, f64::MAX, 0)
    .unwrap();
  db.increment_bucket("a", "p:tokens:hourly", 1, f64::MAX, 0)
    .unwrap();
  assert_eq!(db.get_bucket("a", "p:tokens:hourly", 1).unwrap(), CAP);
}
