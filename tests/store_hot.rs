//! The hot path's shortcuts (`store/sqlite/hot.rs`): decisions from memory while nothing
//! was committed — by anyone — and `recordConsumption`'s buffered writes, counted by
//! every read at once and committed together.

mod store_support;

use omniroute_quota_engine::core::dimensions::{DimensionKey, QuotaUnit, QuotaWindow};
use omniroute_quota_engine::core::enforce::{enforce, EnforceOutcome};
use omniroute_quota_engine::store::sqlite::{locks, Recorded, FLUSH_AT, FLUSH_BATCH};
use omniroute_quota_engine::store::{OpenOptions, SqliteDb};
use std::time::Duration;
use store_support::{
  alloc, brute_totals, enforce_setup, host_conn, host_put, request, serial, temp_db, totals,
  NoSaturation, H, NOW,
};

const BUFFERED: Duration = Duration::from_secs(3600);

fn decide(db: &SqliteDb) -> EnforceOutcome {
  db.hot_scope(|db| enforce(db, &NoSaturation, &request(), 0.5, NOW))
    .unwrap()
}

fn requests_key(pool_id: &str) -> DimensionKey {
  DimensionKey::new(pool_id, QuotaUnit::Requests, QuotaWindow::Hourly)
}

fn committed(conn: &rusqlite::Connection, api_key_id: &str, dimension_key: &str) -> f64 {
  conn
    .query_row(
      "SELECT coalesce(SUM(consumed), 0) FROM quota_consumption WHERE api_key_id = ?1 AND dimension_key = ?2 AND bucket_index = ?3",
      rusqlite::params![api_key_id, dimension_key, NOW / H],
      |r| r.get(0),
    )
    .unwrap()
}

const ALLOW: EnforceOutcome = EnforceOutcome::Allow {
  deprioritize: Some(false),
};

#[test]
fn with_nothing_committed_since_the_last_call_an_enforce_takes_no_lock() {
  let _serial = serial();
  let (_dir, _path, db) = temp_db();
  enforce_setup(&db, 1500.0);
  // The first call reads in a transaction and maps the wal-index; the second fills the
  // cache under a known header.
  assert_eq!(decide(&db), ALLOW);
  assert_eq!(decide(&db), ALLOW);
  assert!(db.hot_cache_current(), "the header has not moved");
  let before = locks::lock_calls();
  assert_eq!(decide(&db), ALLOW);
  assert_eq!(locks::lock_calls() - before, 0, "decided from memory");
}

#[test]
fn another_connections_commit_is_seen_on_the_very_next_call() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    pool_id,
    ..
  } = warm(10.0);
  let host = host_conn(&path);
  host_put(
    &host,
    "k",
    &format!("{pool_id}:requests:hourly"),
    NOW / H,
    10.0,
  );
  assert!(!db.hot_cache_current(), "the commit moved the header");
  assert!(matches!(decide(&db), EnforceOutcome::Block { .. }));
  // A metadata change (a larger plan) is seen next, after the counters were cached again.
  decide(&db);
  host
    .execute(
      "UPDATE provider_plans SET dimensions_json = '[{\"unit\":\"requests\",\"window\":\"hourly\",\"limit\":100}]' WHERE connection_id = 'c'",
      [],
    )
    .unwrap();
  assert_eq!(decide(&db), ALLOW);
}

/// Setup, then two decisions: the cache is warm and current.
fn setup_warm(db: &SqliteDb, limit: f64) -> String {
  let pool_id = enforce_setup(db, limit);
  decide(db);
  decide(db);
  assert!(db.hot_cache_current());
  pool_id
}

/// A fresh database set up and warm, its requests dimension key, and the serial lock
/// (bind `_serial` and `_dir`: they must live as long as the test).
struct Warm {
  _serial: std::sync::MutexGuard<'static, ()>,
  _dir: tempfile::TempDir,
  path: std::path::PathBuf,
  db: SqliteDb,
  pool_id: String,
  key: DimensionKey,
}

fn warm(limit: f64) -> Warm {
  let _serial = serial();
  let (_dir, path, db) = temp_db();
  let pool_id = setup_warm(&db, limit);
  let key = requests_key(&pool_id);
  Warm {
    _serial,
    _dir,
    path,
    db,
    pool_id,
    key,
  }
}

#[test]
fn an_unmap_by_the_engines_sqlite_retires_the_pointer_until_the_next_full_read() {
  let Warm {
    _serial, _dir, db, ..
  } = warm(1500.0);
  // Another engine connection (another file) closing unmaps its wal-index.
  let (_other_dir, _other_path, other) = temp_db();
  other.close().unwrap();
  assert!(
    !db.hot_cache_current(),
    "a pointer taken before an unmap is not used"
  );
  assert_eq!(decide(&db), ALLOW);
  assert_eq!(decide(&db), ALLOW);
  assert!(db.hot_cache_current(), "mapped again by the full read");
}

#[test]
fn buffered_records_count_at_once_and_land_with_the_flush() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(10.0);
  let host = host_conn(&path);
  let write = [(key.clone(), 4.0)];
  assert_eq!(
    db.record_writes("k", &write, NOW, BUFFERED).unwrap(),
    Recorded::Buffered
  );
  assert_eq!(
    db.record_writes("k", &write, NOW, BUFFERED).unwrap(),
    Recorded::Buffered
  );
  assert_eq!(
    db.record_writes("k2", &write, NOW, BUFFERED).unwrap(),
    Recorded::Buffered
  );
  assert_eq!(
    db.pending_count(),
    2,
    "one counter per key, dimension and bucket"
  );
  assert_eq!(committed(&host, "k", &key.to_string()), 0.0);
  // Every read includes them: the key's own counter, the pool total, the decision.
  let mid_hour = NOW;
  assert_eq!(db.peek("k", &key, mid_hour).unwrap(), 8.0);
  assert_eq!(db.pool_consumed_total(&key, mid_hour).unwrap(), 12.0);
  assert_eq!(
    db.get_pair("k", &key.to_string(), NOW / H).unwrap(),
    (8.0, 0.0)
  );
  assert_eq!(db.get_bucket("k2", &key.to_string(), NOW / H).unwrap(), 4.0);
  assert!(
    matches!(decide(&db), EnforceOutcome::Block { .. }),
    "12 of 10 used"
  );

  assert_eq!(db.flush_pending(true).unwrap(), 2);
  assert_eq!(db.pending_count(), 0);
  assert_eq!(committed(&host, "k", &key.to_string()), 8.0);
  assert_eq!(committed(&host, "k2", &key.to_string()), 4.0);
  // Read again after the flush: counted once, not twice.
  assert_eq!(db.pool_consumed_total(&key, mid_hour).unwrap(), 12.0);
  assert!(matches!(decide(&db), EnforceOutcome::Block { .. }));
  assert_eq!(
    totals(&host),
    brute_totals(&host),
    "the totals triggers saw the flush"
  );
  // The next record after a flush asks for a flush again.
  assert_eq!(
    db.record_writes("k", &write, NOW, BUFFERED).unwrap(),
    Recorded::Buffered
  );
}

#[test]
fn write_through_commits_inside_the_call() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(10.0);
  let host = host_conn(&path);
  let outcome = db
    .record_writes("k", &[(key.clone(), 3.0)], NOW, Duration::ZERO)
    .unwrap();
  assert_eq!(outcome, Recorded::Committed);
  assert_eq!(committed(&host, "k", &key.to_string()), 3.0);
  assert_eq!(db.pending_count(), 0);
}

#[test]
fn a_buffer_older_than_its_limit_is_committed_by_the_recording_call() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(10.0);
  let host = host_conn(&path);
  let limit = Duration::from_millis(20);
  let write = [(key.clone(), 1.0)];
  assert_eq!(
    db.record_writes("k", &write, NOW, limit).unwrap(),
    Recorded::Buffered
  );
  std::thread::sleep(Duration::from_millis(30));
  assert_eq!(
    db.record_writes("k", &write, NOW, limit).unwrap(),
    Recorded::Committed
  );
  assert_eq!(committed(&host, "k", &key.to_string()), 2.0);
}

#[test]
fn a_full_buffer_is_committed_by_the_recording_call_in_batches() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(1e9);
  let host = host_conn(&path);
  let commits = omniroute_quota_engine::store::sqlite::record_commits();
  for i in 0..FLUSH_AT - 1 {
    let outcome = db
      .record_writes(&format!("key-{i}"), &[(key.clone(), 1.0)], NOW, BUFFERED)
      .unwrap();
    assert_ne!(outcome, Recorded::Committed, "record {i}");
  }
  let outcome = db
    .record_writes("last", &[(key.clone(), 1.0)], NOW, BUFFERED)
    .unwrap();
  assert_eq!(
    outcome,
    Recorded::Committed,
    "the buffer reached {FLUSH_AT} counters"
  );
  assert_eq!(db.pending_count(), 0);
  assert_eq!(
    omniroute_quota_engine::store::sqlite::record_commits() - commits,
    (FLUSH_AT / FLUSH_BATCH) as u64,
    "committed {FLUSH_BATCH} counters a transaction"
  );
  // More than one batch at once: while the database is locked the buffer grows past a
  // batch (the recording calls back off after a failed flush); all of it lands after.
  host.execute_batch("BEGIN IMMEDIATE").unwrap();
  for i in 0..(2 * FLUSH_BATCH + 7) {
    let outcome = db
      .record_writes(&format!("more-{i}"), &[(key.clone(), 2.0)], NOW, BUFFERED)
      .unwrap();
    assert_ne!(outcome, Recorded::Committed, "record {i}");
  }
  assert_eq!(db.pending_count(), 2 * FLUSH_BATCH + 7);
  host.execute_batch("COMMIT").unwrap();
  assert_eq!(db.flush_pending(false).unwrap(), 2 * FLUSH_BATCH + 7);
  let sum: f64 = host
    .query_row(
      "SELECT SUM(consumed) FROM quota_consumption WHERE dimension_key = ?1",
      [key.to_string()],
      |r| r.get(0),
    )
    .unwrap();
  assert_eq!(sum, FLUSH_AT as f64 + 2.0 * (2 * FLUSH_BATCH + 7) as f64);
  assert_eq!(totals(&host), brute_totals(&host));
}

#[test]
fn a_flush_that_fails_keeps_every_record_for_the_next_one() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(100.0);
  let host = host_conn(&path);
  db.record_writes("k", &[(key.clone(), 5.0)], NOW, BUFFERED)
    .unwrap();
  host.execute_batch("BEGIN IMMEDIATE").unwrap();
  let started = std::time::Instant::now();
  let err = db.flush_pending(true).unwrap_err();
  assert!(err.to_string().contains("locked"), "{err}");
  assert!(
    started.elapsed() < Duration::from_millis(1500),
    "an automatic flush waits briefly, not the whole busy timeout: {:?}",
    started.elapsed()
  );
  assert_eq!(db.pending_count(), 1);
  // The recording calls hold back their own attempts for a while, and keep buffering.
  let outcome = db
    .record_writes("k", &[(key.clone(), 1.0)], NOW, Duration::from_millis(1))
    .unwrap();
  assert_eq!(outcome, Recorded::Buffered);
  assert_eq!(db.peek("k", &key, NOW).unwrap(), 6.0);
  host.execute_batch("COMMIT").unwrap();
  db.flush_pending(true).unwrap();
  assert_eq!(committed(&host, "k", &key.to_string()), 6.0);
}

#[test]
fn closing_commits_the_buffer() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(100.0);
  db.record_writes("k", &[(key.clone(), 7.0)], NOW, BUFFERED)
    .unwrap();
  assert_eq!(db.close().unwrap(), None, "nothing dropped");
  let db = SqliteDb::open(&path, &OpenOptions::default()).unwrap();
  assert_eq!(db.peek("k", &key, NOW).unwrap(), 7.0);
}

#[test]
fn a_bad_write_buffers_nothing() {
  let Warm {
    _serial,
    _dir,
    db,
    pool_id,
    ..
  } = warm(100.0);
  let writes = [
    (requests_key(&pool_id), 1.0),
    (requests_key(&pool_id), f64::NAN),
  ];
  assert!(db.record_writes("k", &writes, NOW, BUFFERED).is_err());
  assert_eq!(db.pending_count(), 0);
}

#[test]
fn clearing_a_counter_drops_what_is_buffered_for_it() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    pool_id,
    key,
  } = warm(100.0);
  let tokens = DimensionKey::new(pool_id.as_str(), QuotaUnit::Tokens, QuotaWindow::Hourly);
  db.record_writes(
    "k",
    &[(key.clone(), 5.0), (tokens.clone(), 9.0)],
    NOW,
    BUFFERED,
  )
  .unwrap();
  db.record_writes("k2", &[(key.clone(), 2.0)], NOW, BUFFERED)
    .unwrap();
  db.clear("k", &key).unwrap();
  assert_eq!(db.peek("k", &key, NOW).unwrap(), 0.0);
  assert_eq!(
    db.pool_consumed_total(&key, NOW).unwrap(),
    2.0,
    "k2's record stays"
  );
  assert_eq!(
    db.peek("k", &tokens, NOW).unwrap(),
    9.0,
    "another dimension stays"
  );
  db.flush_pending(false).unwrap();
  let host = host_conn(&path);
  assert_eq!(committed(&host, "k", &key.to_string()), 0.0);
  assert_eq!(committed(&host, "k2", &key.to_string()), 2.0);
  assert_eq!(totals(&host), brute_totals(&host));
}

#[test]
fn closing_waits_out_a_short_lock_to_commit_the_buffer() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(100.0);
  db.record_writes("k", &[(key.clone(), 7.0)], NOW, BUFFERED)
    .unwrap();
  let host = host_conn(&path);
  host.execute_batch("BEGIN IMMEDIATE").unwrap();
  let release = std::thread::spawn(move || {
    std::thread::sleep(Duration::from_millis(300));
    host.execute_batch("COMMIT").unwrap();
    host
  });
  assert_eq!(
    db.close().unwrap(),
    None,
    "committed after the lock, within the busy timeout"
  );
  let host = release.join().unwrap();
  assert_eq!(committed(&host, "k", &key.to_string()), 7.0);
}

#[test]
fn a_deleted_file_is_noticed_at_once_and_one_renamed_away_within_100_ms() {
  // Its connection's lock calls would show in the tests that count them.
  let _serial = serial();
  let (dir, path, db) = temp_db();
  if cfg!(target_os = "linux") {
    assert!(
      db.watches_descriptor(),
      "the connection's descriptor was found"
    );
  }
  assert!(!db.file_replaced());
  // Renamed away, another file put in its place: seen by the path lookup, at most 100 ms on.
  let moved = dir.path().join("moved.sqlite");
  std::fs::rename(&path, &moved).unwrap();
  std::fs::write(&path, b"").unwrap();
  std::thread::sleep(Duration::from_millis(120));
  assert!(db.file_replaced());
  // Deleted: the descriptor's link count says so at once, whatever the path holds.
  let (other_dir, other_path, other) = temp_db();
  assert!(!other.file_replaced());
  std::fs::remove_file(&other_path).unwrap();
  assert!(other.file_replaced());
  drop(other_dir);
}

#[test]
fn a_deleted_file_is_noticed_at_once_after_this_connections_own_commit() {
  // Every decision `fstat`s the connection's descriptor, after its own commits too.
  let _serial = serial();
  let (dir, path, db) = temp_db();
  enforce_setup(&db, 1500.0);
  let host = host_conn(&path);
  assert_eq!(decide(&db), ALLOW);
  host_put(&host, "other", "x:requests:hourly", 0, 1.0);
  assert!(!db.file_replaced(), "the fstat is taken, the header noted");
  host_put(&host, "other", "x:requests:hourly", 1, 1.0);
  db.increment_bucket("k", "x:requests:hourly", 2, 1.0, NOW)
    .unwrap();
  for suffix in ["", "-wal", "-shm"] {
    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
  }
  assert!(
    db.file_replaced(),
    "own commit since the fstat: looked at once"
  );
  drop((host, dir));
}

#[test]
fn a_deleted_file_is_noticed_at_once_while_another_connection_commits() {
  let _serial = serial();
  let (dir, path, db) = temp_db();
  enforce_setup(&db, 1500.0);
  let host = host_conn(&path);
  assert_eq!(decide(&db), ALLOW);
  assert!(!db.file_replaced());
  // The host keeps committing on its own (now unlinked) file: the header keeps moving.
  std::fs::remove_file(&path).unwrap();
  host_put(&host, "other", "x:requests:hourly", 0, 1.0);
  assert!(db.file_replaced(), "seen by the very next check");
  host_put(&host, "other", "x:requests:hourly", 1, 1.0);
  assert!(db.file_replaced());
  drop((host, dir));
}

#[test]
fn a_record_due_to_commit_waits_in_the_buffer_when_the_file_was_replaced() {
  // A record checks no file (`Access::Buffer`), so its own commit must: a buffer due by
  // age or by size, or write-through, never commits to a file no longer at the path.
  let w = warm(10.0);
  let write = [(w.key.clone(), 4.0)];
  for i in 0..FLUSH_AT - 1 {
    let id = format!("full-{i}");
    assert_eq!(
      w.db.record_writes(&id, &write, NOW, BUFFERED).unwrap(),
      Recorded::Buffered
    );
  }
  let copy = w.path.with_extension("copy");
  std::fs::copy(&w.path, &copy).unwrap();
  std::fs::rename(&copy, &w.path).unwrap();
  assert_eq!(
    w.db.record_writes("k", &write, NOW, BUFFERED).unwrap(),
    Recorded::FileReplaced,
    "full: due by size"
  );
  std::thread::sleep(Duration::from_millis(10));
  for max_age in [Duration::from_millis(5), Duration::ZERO] {
    assert_eq!(
      w.db.record_writes("k", &write, NOW, max_age).unwrap(),
      Recorded::FileReplaced
    );
  }
  assert_eq!(w.db.pending_count(), FLUSH_AT, "every record waits");
  assert_eq!(w.db.peek("k", &w.key, NOW).unwrap(), 12.0);
}

#[test]
fn a_file_renamed_away_is_seen_by_every_check_once_seen() {
  // A record's commit looks the path up and finds another file there; the checks after it
  // must not wait 100 ms for the next lookup (the old file keeps a name: its descriptor
  // says nothing).
  let w = warm(10.0);
  assert!(!w.db.file_replaced());
  std::fs::rename(&w.path, w.path.with_extension("moved")).unwrap();
  std::fs::write(&w.path, b"").unwrap();
  let write = [(w.key.clone(), 1.0)];
  assert_eq!(
    w.db
      .record_writes("k", &write, NOW, Duration::ZERO)
      .unwrap(),
    Recorded::FileReplaced
  );
  assert!(w.db.file_replaced(), "seen again at once");
  assert!(w.db.file_replaced());
}

#[test]
fn a_store_consume_due_to_commit_waits_in_the_buffer_when_the_file_was_replaced() {
  // `consume` checks the file at most every 100 ms (`Access::Hot`): its commit, of a
  // buffer due by age or write-through, looks the path up first.
  let w = warm(10.0);
  assert_eq!(
    w.db
      .consume_buffered("k", &w.key, 1.0, NOW, BUFFERED)
      .unwrap(),
    1.0
  );
  assert!(!w.db.file_replaced_now(), "the next lookup is 100 ms away");
  std::fs::rename(&w.path, w.path.with_extension("moved")).unwrap();
  std::fs::write(&w.path, b"").unwrap();
  std::thread::sleep(Duration::from_millis(2));
  for (max_age, total) in [(Duration::from_millis(1), 2.0), (Duration::ZERO, 3.0)] {
    assert_eq!(
      w.db
        .consume_buffered("k", &w.key, 1.0, NOW, max_age)
        .unwrap(),
      total
    );
    assert_eq!(w.db.pending_count(), 1, "{max_age:?}: still buffered");
  }
}

/// `k` and `k2` in one pool (the setup's plan), each decided twice: both keys' counters cached.
fn two_keys_warm(db: &SqliteDb) {
  let pool_id = enforce_setup(db, 1500.0);
  db.upsert_allocations(&pool_id, &[alloc("k", 50.0), alloc("k2", 50.0)])
    .unwrap();
  for _ in 0..2 {
    assert_eq!(decide(db), ALLOW);
    assert_eq!(decide_for(db, "k2"), ALLOW);
  }
}

fn decide_for(db: &SqliteDb, api_key_id: &str) -> EnforceOutcome {
  let request = omniroute_quota_engine::core::enforce::QuotaRequest {
    api_key_id,
    ..request()
  };
  db.hot_scope(|db| enforce(db, &NoSaturation, &request, 0.5, NOW))
    .unwrap()
}

/// The id of the one pool the setup made (read on the host's connection).
fn the_pool_id(host: &rusqlite::Connection) -> String {
  host
    .query_row("SELECT id FROM quota_pools LIMIT 1", [], |r| r.get(0))
    .unwrap()
}

/// `k2`'s decision, and how many lock calls it made.
fn decide_k2_counting_locks(db: &SqliteDb) -> (EnforceOutcome, u64) {
  let before = locks::lock_calls();
  let outcome = decide_for(db, "k2");
  (outcome, locks::lock_calls() - before)
}

/// A checkpoint that copies the whole WAL back: the next writer starts the WAL over.
fn checkpoint_restart(host: &rusqlite::Connection) {
  host
    .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))
    .unwrap();
}

/// Buffers 3 for `k` and commits it: one counter.
fn flush_three_for_k(db: &SqliteDb, key: &DimensionKey) {
  db.record_writes("k", &[(key.clone(), 3.0)], NOW, BUFFERED)
    .unwrap();
  assert_eq!(db.flush_pending(true).unwrap(), 1);
}

/// The host restarts the WAL (a checkpoint, then its next commit draws new salts).
fn host_restarts_the_wal(host: &rusqlite::Connection) {
  checkpoint_restart(host);
  host_log(host, 1);
}

#[test]
fn a_wal_restart_that_changed_no_counter_keeps_every_cached_counter() {
  let _serial = serial();
  let (dir, path, db) = temp_db();
  let host = host_conn(&path);
  host_log_table(&host); // a schema change: made before the cache is warmed
  two_keys_warm(&db);
  host_restarts_the_wal(&host);
  assert!(
    !db.hot_cache_current(),
    "new salts: the frames cannot be told"
  );
  assert_eq!(
    decide(&db),
    ALLOW,
    "a full read, which finds the data version unchanged"
  );
  assert_eq!(
    decide_k2_counting_locks(&db),
    (ALLOW, 0),
    "k2's counters were kept: decided from memory"
  );
  drop((host, dir));
}

#[test]
fn after_the_engines_own_flush_a_wal_restart_still_keeps_the_cached_counters() {
  // The flush bumps the data version; the counters that followed it are current at the
  // version read inside its transaction.
  let _serial = serial();
  let (dir, path, db) = temp_db();
  let host = host_conn(&path);
  host_log_table(&host);
  two_keys_warm(&db);
  let pool_id = the_pool_id(&host);
  let key = requests_key(&pool_id);
  flush_three_for_k(&db, &key);
  assert!(db.hot_cache_current(), "the flush's counters followed it");
  host_restarts_the_wal(&host);
  assert_eq!(decide(&db), ALLOW);
  assert_eq!(
    decide_k2_counting_locks(&db),
    (ALLOW, 0),
    "k2 decided from memory"
  );
  assert_eq!(db.hot_scope(|db| db.peek("k", &key, NOW)).unwrap(), 3.0);
  drop((host, dir));
}

#[test]
fn records_spread_over_a_thousand_keys_share_one_flush() {
  // Three records for each of 1,000 keys, in turn: the buffer holds 1,000 counters, not
  // full, so each key's three records become one row of one flush.
  let Warm {
    _serial, db, key, ..
  } = warm(1e9);
  let commits = omniroute_quota_engine::store::sqlite::record_commits();
  for round in 0..3 {
    for i in 0..1_000 {
      let outcome = db
        .record_writes(&format!("key-{i}"), &[(key.clone(), 1.0)], NOW, BUFFERED)
        .unwrap();
      assert_eq!(outcome, Recorded::Buffered, "round {round}, key {i}");
    }
  }
  assert_eq!(db.pending_count(), 1_000);
  assert_eq!(db.flush_pending(true).unwrap(), 1_000, "a row per key");
  assert_eq!(
    omniroute_quota_engine::store::sqlite::record_commits() - commits,
    4,
    "in transactions of {FLUSH_BATCH}"
  );
  assert_eq!(db.hot_scope(|db| db.peek("key-7", &key, NOW)).unwrap(), 3.0);
}

#[test]
fn the_counters_of_twenty_thousand_keys_stay_cached() {
  // The bench's three pools (10, 1,000 and 10,000 keys) and more: a cache bound at the
  // working set emptied itself over and over, and every read was a miss.
  let Warm {
    _serial, db, key, ..
  } = warm(1e9);
  let peek = |i: usize| {
    db.hot_scope(|db| db.peek(&format!("key-{i}"), &key, NOW))
      .unwrap()
  };
  for i in 0..20_000 {
    assert_eq!(peek(i), 0.0);
  }
  let before = locks::lock_calls();
  for i in 0..20_000 {
    peek(i);
  }
  assert_eq!(
    locks::lock_calls() - before,
    0,
    "every counter read from memory"
  );
}

#[test]
fn a_flush_that_restarts_the_wal_keeps_the_cached_counters() {
  // A checkpoint that copied the whole WAL back means the next writer starts the WAL
  // over: here that writer is the engine's own flush. Its commit is still the only one
  // since the cache was current, so the cached counters follow it as after any flush.
  let _serial = serial();
  let (dir, path, db) = temp_db();
  let host = host_conn(&path);
  two_keys_warm(&db);
  let key = requests_key(&the_pool_id(&host));
  checkpoint_restart(&host);
  assert!(db.hot_cache_current(), "a checkpoint commits nothing");
  flush_three_for_k(&db, &key);
  assert!(
    db.hot_cache_current(),
    "the flush's own restart: its counters followed it"
  );
  assert_eq!(
    decide_k2_counting_locks(&db),
    (ALLOW, 0),
    "k2 decided from memory"
  );
  assert_eq!(db.hot_scope(|db| db.peek("k", &key, NOW)).unwrap(), 3.0);
  assert_eq!(committed(&host, "k", &key.to_string()), 3.0);
  drop((host, dir));
}

#[test]
fn a_wal_restart_with_a_counter_written_drops_the_cached_counters() {
  let _serial = serial();
  let (dir, path, db) = temp_db();
  let host = host_conn(&path);
  two_keys_warm(&db);
  let pool_id = the_pool_id(&host);
  checkpoint_restart(&host);
  // Another writer adds to k2's counter, in the first frames of the new WAL.
  let key = requests_key(&pool_id);
  host_put(&host, "k2", &key.to_string(), NOW / H, 760.0);
  assert_eq!(
    decide(&db),
    ALLOW,
    "a full read, which finds the data version moved"
  );
  let seen = db.hot_scope(|db| db.peek("k2", &key, NOW)).unwrap();
  assert_eq!(
    seen, 760.0,
    "k2's counter is read again, not taken from the cache"
  );
  drop((host, dir));
}

// --- Commits that leave the engine's tables alone (docs/sqlite.md#decisions-that-survive-unrelated-commits)

/// The host's own table (created before the cache is warmed: creating it is a schema
/// change, which always means a full read).
fn host_log_table(host: &rusqlite::Connection) {
  host
    .execute_batch(
      "CREATE TABLE IF NOT EXISTS host_logs (id INTEGER PRIMARY KEY, at INTEGER, body TEXT);
       CREATE INDEX IF NOT EXISTS host_logs_at ON host_logs (at);",
    )
    .unwrap();
}

/// One row in the host's table, committed on its own (like its call log per request).
fn host_log(host: &rusqlite::Connection, i: i64) {
  host
    .execute(
      "INSERT INTO host_logs (at, body) VALUES (?1, ?2)",
      rusqlite::params![i, "x".repeat(200)],
    )
    .unwrap();
}

/// A warm cache on a file where the host has its own table.
fn warm_with_host_table(limit: f64) -> (Warm, rusqlite::Connection) {
  let _serial = serial();
  let (_dir, path, db) = temp_db();
  let host = host_conn(&path);
  host_log_table(&host);
  let pool_id = setup_warm(&db, limit);
  let key = requests_key(&pool_id);
  (
    Warm {
      _serial,
      _dir,
      path,
      db,
      pool_id,
      key,
    },
    host,
  )
}

#[test]
fn a_commit_to_another_table_leaves_the_next_decision_in_memory() {
  let (
    Warm {
      _serial, _dir, db, ..
    },
    host,
  ) = warm_with_host_table(1500.0);
  host_log(&host, 0);
  assert!(
    db.hot_cache_current(),
    "the header moved, but not for a page the engine's reads depend on"
  );
  let before = locks::lock_calls();
  assert_eq!(decide(&db), ALLOW);
  assert_eq!(locks::lock_calls() - before, 0, "decided from memory");
  assert_eq!(db.hot_skips(), 1);
  // And again, commit after commit (the host's own lock calls are counted too: only the
  // decisions' are compared), its table growing by pages (which rewrites page 1: the
  // schema cookie there has not moved).
  for i in 1..60 {
    host_log(&host, i);
    let before = locks::lock_calls();
    assert_eq!(decide(&db), ALLOW);
    assert_eq!(locks::lock_calls() - before, 0, "decision {i} from memory");
  }
}

#[test]
fn after_many_unrelated_commits_a_commit_to_the_counters_or_the_metadata_is_seen_at_once() {
  let (
    Warm {
      _serial,
      _dir,
      db,
      pool_id,
      key,
      ..
    },
    host,
  ) = warm_with_host_table(10.0);
  // Enough rows that the host's table grows by pages (which rewrites page 1 now and then:
  // those commits cost a full read, the others none).
  for i in 0..300 {
    host_log(&host, i);
    assert_eq!(decide(&db), ALLOW);
  }
  assert_eq!(db.hot_skips(), 300, "every unrelated commit was skipped");
  // The host writes the counter (its old code, or another process), between two rows of
  // its own: the next decision sees it.
  host_log(&host, 300);
  host_put(
    &host,
    "k",
    &format!("{pool_id}:requests:hourly"),
    NOW / H,
    10.0,
  );
  host_log(&host, 301);
  assert!(!db.hot_cache_current(), "a counter page was rewritten");
  assert!(matches!(decide(&db), EnforceOutcome::Block { .. }));
  assert_eq!(db.peek("k", &key, NOW).unwrap(), 10.0);
  for i in 302..310 {
    host_log(&host, i);
    assert!(matches!(decide(&db), EnforceOutcome::Block { .. }));
  }
  // An update of the row, then a metadata change (a larger plan), each after unrelated rows.
  host
    .execute(
      "UPDATE quota_consumption SET consumed = 3 WHERE api_key_id = 'k'",
      [],
    )
    .unwrap();
  host_log(&host, 310);
  assert_eq!(decide(&db), ALLOW);
  host
    .execute(
      "UPDATE quota_consumption SET consumed = 10 WHERE api_key_id = 'k'",
      [],
    )
    .unwrap();
  host_log(&host, 311);
  assert!(matches!(decide(&db), EnforceOutcome::Block { .. }));
  host
    .execute(
      "UPDATE provider_plans SET dimensions_json = '[{\"unit\":\"requests\",\"window\":\"hourly\",\"limit\":100}]' WHERE connection_id = 'c'",
      [],
    )
    .unwrap();
  host_log(&host, 312);
  assert_eq!(decide(&db), ALLOW);
  // A deleted row.
  host
    .execute(
      "UPDATE provider_plans SET dimensions_json = '[{\"unit\":\"requests\",\"window\":\"hourly\",\"limit\":10}]' WHERE connection_id = 'c'",
      [],
    )
    .unwrap();
  assert!(matches!(decide(&db), EnforceOutcome::Block { .. }));
  host_log(&host, 313);
  host
    .execute("DELETE FROM quota_consumption WHERE api_key_id = 'k'", [])
    .unwrap();
  host_log(&host, 314);
  assert_eq!(decide(&db), ALLOW);
}

#[test]
fn a_direct_write_to_the_pool_totals_is_seen_after_unrelated_commits() {
  let (
    Warm {
      _serial,
      _dir,
      db,
      key,
      ..
    },
    host,
  ) = warm_with_host_table(1500.0);
  host_put(&host, "k", &key.to_string(), NOW / H, 4.0);
  let read = |db: &SqliteDb| {
    db.hot_scope(|db| db.pool_consumed_total(&key, NOW))
      .unwrap()
  };
  read(&db);
  assert_eq!(read(&db), 4.0);
  host_log(&host, 0);
  assert_eq!(read(&db), 4.0);
  assert_eq!(db.hot_skips(), 1);
  // What the retention sweep's reconciliation does: the totals table alone.
  host
    .execute(
      "UPDATE quota_consumption_totals SET consumed = 7 WHERE dimension_key = ?1",
      [key.to_string()],
    )
    .unwrap();
  host_log(&host, 1);
  assert_eq!(read(&db), 7.0);
}

#[test]
fn a_dropped_version_trigger_is_recreated_and_writes_through_it_are_seen() {
  let (
    Warm {
      _serial,
      _dir,
      db,
      pool_id,
      ..
    },
    host,
  ) = warm_with_host_table(10.0);
  host_put(
    &host,
    "k",
    &format!("{pool_id}:requests:hourly"),
    NOW / H,
    9.0,
  );
  assert_eq!(decide(&db), ALLOW);
  host
    .execute_batch("DROP TRIGGER quota_consumption_data_version_au")
    .unwrap();
  assert_eq!(decide(&db), ALLOW);
  assert!(
    store_support::schema_names(db.connection(), "trigger")
      .contains(&"quota_consumption_data_version_au".to_string()),
    "the schema change made the engine apply its migrations again"
  );
  decide(&db);
  host_log(&host, 0);
  assert_eq!(decide(&db), ALLOW);
  host
    .execute(
      "UPDATE quota_consumption SET consumed = 10 WHERE api_key_id = 'k'",
      [],
    )
    .unwrap();
  host_log(&host, 1);
  assert!(matches!(decide(&db), EnforceOutcome::Block { .. }));
}

#[test]
fn a_wal_restart_means_a_full_read() {
  let (
    Warm {
      _serial,
      _dir,
      db,
      pool_id,
      ..
    },
    host,
  ) = warm_with_host_table(10.0);
  host_log(&host, 0);
  assert_eq!(decide(&db), ALLOW);
  let (_, _, _): (i64, i64, i64) = host
    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
      Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })
    .unwrap();
  host_put(
    &host,
    "k",
    &format!("{pool_id}:requests:hourly"),
    NOW / H,
    10.0,
  );
  assert!(
    !db.hot_cache_current(),
    "new salts: the frames cannot be compared"
  );
  assert!(matches!(decide(&db), EnforceOutcome::Block { .. }));
}

#[test]
fn past_the_first_wal_index_region_commits_are_still_told_apart() {
  let (
    Warm {
      _serial,
      _dir,
      db,
      pool_id,
      path,
      ..
    },
    host,
  ) = warm_with_host_table(10.0);
  // No checkpoint, so the WAL grows past the 4062 frames whose page numbers are in region
  // 0 of the wal-index.
  host.execute_batch("PRAGMA wal_autocheckpoint = 0").unwrap();
  let wal = path.with_file_name("storage.sqlite-wal");
  let frames = || {
    (std::fs::metadata(&wal)
      .expect("the -wal file")
      .len()
      .saturating_sub(32))
      / (4096 + 24)
  };
  let mut i = 0;
  while frames() < 4200 {
    host_log(&host, i);
    if i % 50 == 0 {
      assert_eq!(decide(&db), ALLOW);
    }
    i += 1;
  }
  assert_eq!(decide(&db), ALLOW);
  decide(&db);
  let skips = db.hot_skips();
  host_log(&host, i);
  assert!(
    db.hot_cache_current(),
    "a frame past region 0, of another table"
  );
  assert_eq!(decide(&db), ALLOW);
  assert_eq!(db.hot_skips(), skips + 1);
  host_put(
    &host,
    "k",
    &format!("{pool_id}:requests:hourly"),
    NOW / H,
    10.0,
  );
  host_log(&host, i + 1);
  assert!(!db.hot_cache_current(), "a counter page, past region 0");
  assert!(matches!(decide(&db), EnforceOutcome::Block { .. }));
}

#[test]
fn a_schema_change_by_the_host_means_a_full_read() {
  let (
    Warm {
      _serial, _dir, db, ..
    },
    host,
  ) = warm_with_host_table(10.0);
  host_log(&host, 0);
  assert!(db.hot_cache_current());
  host
    .execute_batch("CREATE TABLE host_other (x INTEGER)")
    .unwrap();
  assert!(!db.hot_cache_current(), "the schema cookie moved");
  let before = locks::lock_calls();
  assert_eq!(decide(&db), ALLOW);
  assert!(locks::lock_calls() > before, "read in a transaction");
  // Under the new cookie, the host's rows are skipped again.
  host_log(&host, 1);
  assert!(db.hot_cache_current());
}

#[test]
fn a_flush_of_its_own_records_leaves_the_next_decision_in_memory_with_what_it_committed() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(10.0);
  let host = host_conn(&path);
  let four = [(key.clone(), 4.0)];
  let peek = |db: &SqliteDb| db.hot_scope(|db| db.peek("k", &key, NOW)).unwrap();
  let total = |db: &SqliteDb| {
    db.hot_scope(|db| db.pool_consumed_total(&key, NOW))
      .unwrap()
  };
  db.record_writes("k", &four, NOW, BUFFERED).unwrap();
  db.record_writes("k2", &[(key.clone(), 1.0)], NOW, BUFFERED)
    .unwrap();
  assert_eq!(decide(&db), ALLOW);
  assert_eq!(db.flush_pending(true).unwrap(), 2);
  assert!(
    db.hot_cache_current(),
    "its own commit is followed, not a reason to read everything again"
  );
  let before = locks::lock_calls();
  assert_eq!(decide(&db), ALLOW);
  assert_eq!(
    locks::lock_calls() - before,
    0,
    "decided from memory after the flush"
  );
  // The cached counters took the committed additions once: not lost, not doubled.
  assert_eq!(peek(&db), 4.0);
  assert_eq!(total(&db), 5.0);
  db.record_writes("k", &four, NOW, BUFFERED).unwrap();
  db.flush_pending(true).unwrap();
  assert_eq!(decide(&db), ALLOW, "8 of 10, the pool at 9");
  db.record_writes("k", &four, NOW, BUFFERED).unwrap();
  db.flush_pending(true).unwrap();
  assert!(db.hot_cache_current());
  assert!(
    matches!(decide(&db), EnforceOutcome::Block { .. }),
    "12 of 10"
  );
  assert_eq!((peek(&db), total(&db)), (12.0, 13.0));
  assert_eq!(committed(&host, "k", &key.to_string()), 12.0);
  assert_eq!(totals(&host), brute_totals(&host));
}

#[test]
fn a_flush_after_another_connection_wrote_a_counter_reads_it_again() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(10.0);
  let host = host_conn(&path);
  host_put(&host, "k", &key.to_string(), NOW / H, 7.0);
  db.record_writes("k", &[(key.clone(), 1.0)], NOW, BUFFERED)
    .unwrap();
  assert_eq!(db.flush_pending(true).unwrap(), 1);
  assert!(
    !db.hot_cache_current(),
    "the cache missed the other write: it is not carried past the flush"
  );
  assert_eq!(db.hot_scope(|db| db.peek("k", &key, NOW)).unwrap(), 8.0);
  assert_eq!(
    db.hot_scope(|db| db.pool_consumed_total(&key, NOW))
      .unwrap(),
    8.0
  );
}

#[test]
fn a_flush_near_the_counter_cap_saturates_the_cached_counter_as_the_upsert_does() {
  let Warm {
    _serial,
    _dir,
    path,
    db,
    key,
    ..
  } = warm(1e16);
  let host = host_conn(&path);
  host_put(&host, "k", &key.to_string(), NOW / H, 1e15 - 2.0);
  // A full read takes the host's row into the cache.
  let peek = |db: &SqliteDb| db.hot_scope(|db| db.peek("k", &key, NOW)).unwrap();
  assert_eq!(peek(&db), 1e15 - 2.0);
  db.record_writes("k", &[(key.clone(), 5.0)], NOW, BUFFERED)
    .unwrap();
  assert_eq!(db.flush_pending(true).unwrap(), 1);
  assert!(db.hot_cache_current());
  assert_eq!(peek(&db), 1e15, "saturated, as the stored counter");
  assert_eq!(committed(&host, "k", &key.to_string()), 1e15);
  assert_eq!(
    db.hot_scope(|db| db.pool_consumed_total(&key, NOW))
      .unwrap(),
    totals(&host)
      .iter()
      .filter(|(d, b, _, _)| *d == key.to_string() && *b == NOW / H)
      .map(|t| t.2)
      .sum::<f64>()
  );
}
