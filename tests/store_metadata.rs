//! The metadata tables (docs/contract.md §5): pools, allocations, membership, plans, model caps,
//! settings; validation that writes nothing; lenient reads of rows other writers made;
//! the hot-path cache seeing the host's commits on the next call; the usage snapshot.

mod store_support;

use omniroute_quota_engine::core::dimensions::{
  PlanSource, Policy, PoolAllocation, ProviderPlan, QuotaDimension, QuotaUnit, QuotaWindow,
};
use omniroute_quota_engine::core::plans::resolve_plan;
use omniroute_quota_engine::error::{ArgErrorKind, QuotaError};
use omniroute_quota_engine::store::{
  LegacyPool, ModelCap, NewPool, PlanDimension, PoolUpdate, SqliteDb,
};
use store_support::*;

const NOW: i64 = 1_700_000_000_000;

fn field(err: QuotaError) -> String {
  match err {
    QuotaError::InvalidArg { field, .. } => field,
    other => panic!("expected an invalid-argument error, got {other:?}"),
  }
}

fn counts(db: &SqliteDb) -> [i64; 5] {
  [
    "quota_pools",
    "quota_allocations",
    "quota_pool_connections",
    "provider_plans",
    "quota_allocation_model_caps",
  ]
  .map(|t| {
    db.connection()
      .query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| r.get(0))
      .unwrap()
  })
}

fn new_pool(conn: &str, allocations: Vec<PoolAllocation>) -> NewPool {
  NewPool {
    connection_id: conn.into(),
    name: "Team".into(),
    group_id: None,
    allocations,
    connection_ids: vec![],
  }
}

#[test]
fn create_get_list_update_delete() {
  let (_dir, _path, db) = temp_db();
  let mut capped = alloc("k2", 40.0);
  capped.cap_value = Some(1000.0);
  capped.cap_unit = Some(QuotaUnit::Tokens);
  capped.policy = Policy::Burst;
  let pool = db
    .create_pool(
      &NewPool {
        connection_ids: vec!["c2".into(), "c1".into(), "c3".into()],
        ..new_pool("c1", vec![alloc("k1", 60.0), capped.clone()])
      },
      NOW,
    )
    .unwrap();
  assert_eq!(pool.id.len(), 36);
  assert_eq!(pool.created_at, "2023-11-14T22:13:20.000Z");
  assert_eq!(pool.connection_id, "c1");
  assert_eq!(pool.connection_ids, ["c1", "c2", "c3"]);
  assert_eq!(pool.group_id, "group-demo");
  // Stored as the host's module stores it, so its by-group queries find the pool.
  let stored: String = (db.connection())
    .query_row(
      "SELECT group_id FROM quota_pools WHERE id = ?1",
      [&pool.id],
      |r| r.get(0),
    )
    .unwrap();
  assert_eq!(stored, "group-demo");
  assert_eq!(pool.allocations, vec![alloc("k1", 60.0), capped]);
  assert_eq!(db.get_pool(&pool.id).unwrap().as_ref(), Some(&pool));
  assert_eq!(db.get_pool("nope").unwrap(), None);

  let second = db
    .create_pool(
      &NewPool {
        group_id: Some("g".into()),
        ..new_pool("c9", vec![])
      },
      NOW + 1,
    )
    .unwrap();
  assert_eq!(second.group_id, "g");
  assert_eq!(second.connection_ids, ["c9"]);
  let page = db.list_pools(None, None).unwrap();
  assert_eq!(page.total, 2);
  assert_eq!(page.items, vec![pool.clone(), second.clone()]);
  let page = db.list_pools(Some(1), Some(1)).unwrap();
  assert_eq!((page.total, page.items.len()), (2, 1));
  assert_eq!(page.items[0].id, second.id);

  // Update: name, group, allocations replaced, membership without the old primary.
  let updated = db
    .update_pool(
      &pool.id,
      &PoolUpdate {
        name: Some("Renamed".into()),
        group_id: Some("g2".into()),
        allocations: Some(vec![alloc("k3", 100.0)]),
        connection_ids: Some(vec!["c3".into(), "c4".into(), "c3".into()]),
      },
      NOW + 2,
    )
    .unwrap()
    .unwrap();
  assert_eq!(updated.name, "Renamed");
  assert_eq!(updated.group_id, "g2");
  assert_eq!(updated.allocations, vec![alloc("k3", 100.0)]);
  assert_eq!(updated.connection_id, "c3");
  assert_eq!(updated.connection_ids, ["c3", "c4"]);
  // Keeping the primary moves it first; an empty list means the legacy form.
  let kept = db
    .update_pool(
      &pool.id,
      &PoolUpdate {
        connection_ids: Some(vec!["c5".into(), "c3".into()]),
        ..Default::default()
      },
      NOW + 3,
    )
    .unwrap()
    .unwrap();
  assert_eq!(kept.connection_ids, ["c3", "c5"]);
  let legacy = db
    .update_pool(
      &pool.id,
      &PoolUpdate {
        connection_ids: Some(vec![]),
        ..Default::default()
      },
      NOW + 4,
    )
    .unwrap()
    .unwrap();
  assert_eq!(legacy.connection_ids, ["c3"]);
  assert_eq!(
    db.update_pool("nope", &PoolUpdate::default(), NOW).unwrap(),
    None
  );

  // Delete cascades allocations, membership and model caps of the pool only.
  db.set_model_cap(&ModelCap {
    pool_id: pool.id.clone(),
    api_key_id: "k3".into(),
    model: "gpt".into(),
    cap_value: 5.0,
    cap_unit: QuotaUnit::Requests,
  })
  .unwrap();
  assert!(db.delete_pool(&pool.id).unwrap());
  assert!(!db.delete_pool(&pool.id).unwrap());
  assert_eq!(db.get_pool(&pool.id).unwrap(), None);
  assert_eq!(db.get_model_cap(&pool.id, "k3", "gpt").unwrap(), None);
  assert_eq!(counts(&db), [1, 0, 1, 0, 0]);
}

#[test]
fn invalid_writes_name_the_field_and_write_nothing() {
  let (_dir, _path, db) = temp_db();
  let pool = db
    .create_pool(&new_pool("c1", vec![alloc("k1", 10.0)]), NOW)
    .unwrap();
  let before = counts(&db);
  let mut cap_zero = alloc("k2", 1.0);
  cap_zero.cap_value = Some(0.0);
  let cases: Vec<(Result<(), QuotaError>, &str)> = vec![
    (
      db.create_pool(&new_pool("", vec![]), NOW).map(drop),
      "input.connectionId",
    ),
    (
      db.create_pool(
        &NewPool {
          name: String::new(),
          ..new_pool("c", vec![])
        },
        NOW,
      )
      .map(drop),
      "input.name",
    ),
    (
      db.create_pool(
        &new_pool("c", vec![alloc("a", 1.0), alloc("b", 100.01)]),
        NOW,
      )
      .map(drop),
      "input.allocations[1].weight",
    ),
    (
      db.create_pool(&new_pool("c", vec![alloc("a", f64::NAN)]), NOW)
        .map(drop),
      "input.allocations[0].weight",
    ),
    (
      db.create_pool(&new_pool("c", vec![alloc("a", 1.0), cap_zero.clone()]), NOW)
        .map(drop),
      "input.allocations[1].capValue",
    ),
    (
      db.create_pool(&new_pool("c", vec![alloc("a", 1.0), alloc("a", 2.0)]), NOW)
        .map(drop),
      "input.allocations[1].apiKeyId",
    ),
    (
      db.create_pool(
        &NewPool {
          connection_ids: vec!["x".into(), String::new()],
          ..new_pool("c", vec![])
        },
        NOW,
      )
      .map(drop),
      "input.connectionIds[1]",
    ),
    (
      db.update_pool(
        &pool.id,
        &PoolUpdate {
          allocations: Some(vec![alloc("a", -1.0)]),
          ..Default::default()
        },
        NOW,
      )
      .map(drop),
      "patch.allocations[0].weight",
    ),
    (
      db.upsert_allocations(&pool.id, &[cap_zero.clone()])
        .map(drop),
      "allocations[0].capValue",
    ),
    (
      db.upsert_provider_plan(
        &ProviderPlan {
          connection_id: Some("c1".into()),
          provider: "kimi".into(),
          dimensions: vec![
            QuotaDimension {
              unit: QuotaUnit::Tokens,
              window: QuotaWindow::Daily,
              limit: 5.0,
            },
            QuotaDimension {
              unit: QuotaUnit::Tokens,
              window: QuotaWindow::Weekly,
              limit: 0.0,
            },
          ],
          source: PlanSource::Manual,
        },
        NOW,
      )
      .map(drop),
      "plan.dimensions[1].limit",
    ),
    (
      db.upsert_provider_plan(
        &ProviderPlan {
          connection_id: None,
          provider: "kimi".into(),
          dimensions: vec![],
          source: PlanSource::Manual,
        },
        NOW,
      )
      .map(drop),
      "plan.connectionId",
    ),
    (
      db.set_model_cap(&ModelCap {
        pool_id: pool.id.clone(),
        api_key_id: "k1".into(),
        model: "m".into(),
        cap_value: -1.0,
        cap_unit: QuotaUnit::Tokens,
      })
      .map(drop),
      "cap.capValue",
    ),
    (
      db.import_legacy_pools(
        &[LegacyPool {
          id: "p".into(),
          connection_id: "c".into(),
          name: "n".into(),
          allocations: vec![alloc("a", 101.0)],
          ..Default::default()
        }],
        NOW,
      )
      .map(drop),
      "pools[0].allocations[0].weight",
    ),
  ];
  for (result, expected) in cases {
    assert_eq!(field(result.unwrap_err()), expected);
  }
  assert_eq!(counts(&db), before);
  assert_eq!(
    db.get_pool(&pool.id).unwrap().unwrap().allocations,
    vec![alloc("k1", 10.0)]
  );
}

#[test]
fn reads_are_lenient_about_rows_other_writers_made() {
  let (_dir, path, db) = temp_db();
  let host = host_conn(&path);
  host
    .execute_batch(
      "PRAGMA ignore_check_constraints = ON;
       INSERT INTO quota_pools (id, connection_id, name, created_at, group_id)
         VALUES ('p1', 'c1', 'Legacy', '2024-05-01 10:20:30', '');
       INSERT INTO quota_allocations (pool_id, api_key_id, weight, cap_value, cap_unit, policy)
         VALUES ('p1', 'a', 250, NULL, 'bytes', 'lenient'),
                ('p1', 'b', -3, 7, 'usd', 'soft');
       INSERT INTO provider_plans (connection_id, provider, dimensions_json, source)
         VALUES ('c1', 'kimi', '[{\"unit\":\"tokens\",\"window\":\"daily\",\"limit\":10},
           {\"unit\":\"bytes\",\"window\":\"daily\",\"limit\":1}, 42,
           {\"unit\":\"requests\",\"window\":\"hourly\"}]', 'auto'),
                ('c2', 'glm', 'not json at all', 'manual');",
    )
    .unwrap();
  let pool = db.get_pool("p1").unwrap().unwrap();
  assert_eq!(pool.group_id, "group-demo");
  assert_eq!(pool.created_at, "2024-05-01T10:20:30Z");
  assert_eq!(pool.connection_ids, ["c1"]);
  let a = &pool.allocations[0];
  assert_eq!(
    (a.weight, a.cap_unit, a.policy),
    (100.0, None, Policy::Hard)
  );
  let b = &pool.allocations[1];
  assert_eq!(
    (b.weight, b.cap_value, b.cap_unit, b.policy),
    (0.0, Some(7.0), Some(QuotaUnit::Usd), Policy::Soft)
  );
  let plan = db.get_provider_plan("c1").unwrap().unwrap();
  assert_eq!(plan.source, PlanSource::Auto);
  assert_eq!(
    plan.dimensions,
    vec![QuotaDimension {
      unit: QuotaUnit::Tokens,
      window: QuotaWindow::Daily,
      limit: 10.0
    }]
  );
  let broken = db.get_provider_plan("c2").unwrap().unwrap();
  assert!(broken.dimensions.is_empty());
  assert_eq!(db.get_provider_plan("c3").unwrap(), None);
  // The resolver: a stored plan without usable dimensions falls back to the catalog.
  let resolve = |id| resolve_plan(db.get_provider_plan(id).unwrap(), "kimi");
  assert_eq!(resolve("c2").source, PlanSource::Auto);
  assert_eq!(resolve("c1").connection_id.as_deref(), Some("c1"));
}

#[test]
fn plans_caps_settings_and_allocations_round_trip() {
  let (_dir, path, db) = temp_db();
  let plan = ProviderPlan {
    connection_id: Some("c1".into()),
    provider: "codex".into(),
    dimensions: vec![QuotaDimension {
      unit: QuotaUnit::Percent,
      window: QuotaWindow::FiveHours,
      limit: 100.0,
    }],
    source: PlanSource::Manual,
  };
  assert_eq!(db.upsert_provider_plan(&plan, NOW).unwrap(), plan);
  assert_eq!(db.get_provider_plan("c1").unwrap(), Some(plan.clone()));
  let replaced = ProviderPlan {
    source: PlanSource::Auto,
    ..plan.clone()
  };
  db.upsert_provider_plan(&replaced, NOW).unwrap();
  assert_eq!(db.get_provider_plan("c1").unwrap(), Some(replaced));
  assert!(db.delete_provider_plan("c1").unwrap());
  assert!(!db.delete_provider_plan("c1").unwrap());
  assert_eq!(db.get_provider_plan("c1").unwrap(), None);

  let cap = ModelCap {
    pool_id: "p".into(),
    api_key_id: "k".into(),
    model: "gpt-4o".into(),
    cap_value: 12.5,
    cap_unit: QuotaUnit::Usd,
  };
  db.set_model_cap(&cap).unwrap();
  assert_eq!(
    db.get_model_cap("p", "k", "gpt-4o").unwrap(),
    Some(cap.clone())
  );
  db.set_model_cap(&ModelCap {
    cap_value: 3.0,
    ..cap.clone()
  })
  .unwrap();
  assert_eq!(
    db.get_model_cap("p", "k", "gpt-4o")
      .unwrap()
      .unwrap()
      .cap_value,
    3.0
  );
  assert_eq!(db.get_model_cap("p", "k", "other").unwrap(), None);
  assert!(db.delete_model_cap("p", "k", "gpt-4o").unwrap());
  assert!(!db.delete_model_cap("p", "k", "gpt-4o").unwrap());

  let host = host_conn(&path);
  host
    .execute(
      "INSERT INTO key_value (namespace, key, value) VALUES ('settings', 'quotaStore', ?1)",
      [r#"{"driver":"redis","redisUrl":"redis://127.0.0.1:6379"}"#],
    )
    .unwrap();
  assert_eq!(
    db.read_setting("settings", "quotaStore")
      .unwrap()
      .as_deref(),
    Some(r#"{"driver":"redis","redisUrl":"redis://127.0.0.1:6379"}"#)
  );
  assert_eq!(db.read_setting("settings", "other").unwrap(), None);

  let p1 = db
    .create_pool(&new_pool("c1", vec![alloc("k", 10.0)]), NOW)
    .unwrap();
  let p2 = db
    .create_pool(
      &new_pool("c2", vec![alloc("k", 20.0), alloc("j", 1.0)]),
      NOW,
    )
    .unwrap();
  assert!(db
    .upsert_allocations(&p1.id, &[alloc("k", 30.0), alloc("z", 5.0)])
    .unwrap());
  assert!(!db
    .upsert_allocations("missing", &[alloc("k", 1.0)])
    .unwrap());
  let listed = db.list_allocations_for_api_key("k").unwrap();
  assert_eq!(
    listed,
    vec![
      (p1.id.clone(), alloc("k", 30.0)),
      (p2.id.clone(), alloc("k", 20.0))
    ]
  );
  assert!(db
    .list_allocations_for_api_key("nobody")
    .unwrap()
    .is_empty());
}

#[test]
fn import_legacy_pools_runs_once() {
  let (_dir, _path, db) = temp_db();
  let pools = vec![
    LegacyPool {
      id: "legacy-1".into(),
      connection_id: "c1".into(),
      name: "One".into(),
      group_id: Some("g".into()),
      created_at: Some("2024-01-01T00:00:00.000Z".into()),
      allocations: vec![alloc("k1", 50.0), alloc("k2", 50.0)],
      connection_ids: vec!["c1".into(), "c2".into()],
    },
    LegacyPool {
      id: "legacy-2".into(),
      connection_id: "c3".into(),
      name: "Two".into(),
      ..Default::default()
    },
  ];
  assert_eq!(db.import_legacy_pools(&pools, NOW).unwrap(), 2);
  let one = db.get_pool("legacy-1").unwrap().unwrap();
  assert_eq!(one.created_at, "2024-01-01T00:00:00.000Z");
  assert_eq!(one.connection_ids, ["c1", "c2"]);
  assert_eq!(one.allocations.len(), 2);
  let two = db.get_pool("legacy-2").unwrap().unwrap();
  assert_eq!(two.created_at, "2023-11-14T22:13:20.000Z");
  assert_eq!(db.import_legacy_pools(&pools, NOW).unwrap(), 0);
  assert_eq!(db.list_pools(None, None).unwrap().total, 2);
  let dup = [pools[1].clone(), pools[1].clone()];
  let (_d2, _p2, empty) = temp_db();
  assert_eq!(
    field(empty.import_legacy_pools(&dup, NOW).unwrap_err()),
    "pools[1].id"
  );
  assert_eq!(empty.list_pools(None, None).unwrap().total, 0);
}

#[test]
fn a_model_name_of_a_hostile_length_is_looked_up_but_not_cached() {
  let (_dir, _path, db) = temp_db();
  let entries = db.cache_entries();
  assert_eq!(db.cached_model_cap("p", "k", "gpt-4o").unwrap(), None);
  assert_eq!(db.cache_entries(), entries + 1);
  for i in 0..100 {
    let model = format!("{i}{}", "m".repeat(1 << 20));
    assert_eq!(db.cached_model_cap("p", "k", &model).unwrap(), None);
  }
  assert_eq!(db.cache_entries(), entries + 1);
}

#[test]
fn the_cache_sees_host_commits_on_the_next_call() {
  let (_dir, path, db) = temp_db();
  let host = host_conn(&path);
  assert!(db.pools_for_api_key("k").unwrap().is_empty());
  assert_eq!(db.match_pool("k", "c1").unwrap(), None);
  // The host writes a pool through its own connection.
  host
    .execute_batch(
      "INSERT INTO quota_pools (id, connection_id, name) VALUES ('hp', 'c0', 'Host pool');
       INSERT INTO quota_pool_connections (pool_id, connection_id, created_at)
         VALUES ('hp', 'c0', '2024-01-01T00:00:00.000Z'), ('hp', 'c1', '2024-01-02T00:00:00.000Z');
       INSERT INTO quota_allocations (pool_id, api_key_id, weight) VALUES ('hp', 'k', 25);",
    )
    .unwrap();
  let pools = db.pools_for_api_key("k").unwrap();
  assert_eq!(pools.len(), 1);
  assert_eq!(pools[0].0.connection_ids, ["c0", "c1"]);
  assert_eq!(pools[0].1.weight, 25.0);
  let (matched, allocation) = db.match_pool("k", "c1").unwrap().unwrap();
  assert_eq!((matched.id.as_str(), allocation.weight), ("hp", 25.0));
  assert_eq!(db.match_pool("k", "c9").unwrap(), None);
  // Unrelated commits keep the cache; a metadata change empties it.
  let entries = db.cache_entries();
  assert!(entries > 0);
  host
    .execute(
      "INSERT INTO key_value (namespace, key, value) VALUES ('x', 'y', 'z')",
      [],
    )
    .unwrap();
  host
    .execute(
      "INSERT INTO quota_consumption VALUES ('k', 'hp:tokens:daily', 1, 1, 1)",
      [],
    )
    .unwrap();
  assert_eq!(db.pools_for_api_key("k").unwrap()[0].1.weight, 25.0);
  assert_eq!(db.cache_entries(), entries);
  host
    .execute(
      "UPDATE quota_allocations SET weight = 75 WHERE api_key_id = 'k'",
      [],
    )
    .unwrap();
  assert_eq!(db.pools_for_api_key("k").unwrap()[0].1.weight, 75.0);
  assert_eq!(
    db.get_pool("hp").unwrap().unwrap().allocations[0].weight,
    75.0
  );
  // Plans and caps too, including rows that disappear.
  assert_eq!(db.cached_provider_plan("c0").unwrap(), None);
  assert_eq!(db.cached_model_cap("hp", "k", "m").unwrap(), None);
  host
    .execute_batch(
      "INSERT INTO provider_plans (connection_id, provider, dimensions_json)
         VALUES ('c0', 'kimi', '[{\"unit\":\"requests\",\"window\":\"hourly\",\"limit\":5}]');
       INSERT INTO quota_allocation_model_caps VALUES ('hp', 'k', 'm', 3, 'requests');",
    )
    .unwrap();
  assert_eq!(
    db.cached_provider_plan("c0").unwrap().unwrap().dimensions[0].limit,
    5.0
  );
  assert_eq!(
    db.cached_model_cap("hp", "k", "m")
      .unwrap()
      .unwrap()
      .cap_value,
    3.0
  );
  host
    .execute("DELETE FROM quota_pools WHERE id = 'hp'", [])
    .unwrap();
  assert!(db.pools_for_api_key("k").unwrap().is_empty());
  // The engine's own writes are seen at once too.
  let own = db
    .create_pool(&new_pool("c7", vec![alloc("k", 5.0)]), NOW)
    .unwrap();
  assert_eq!(db.match_pool("k", "c7").unwrap().unwrap().0.id, own.id);
}

#[test]
fn usage_snapshot_shape() {
  let (_dir, _path, db) = temp_db();
  let pool = db
    .create_pool(
      &new_pool(
        "c",
        vec![alloc("a", 60.0), alloc("b", 40.0), alloc("idle", 0.0)],
      ),
      NOW,
    )
    .unwrap();
  let t = 100 * DAY + DAY / 2;
  let daily = store_support::key(&pool.id, QuotaUnit::Tokens, QuotaWindow::Daily);
  db.consume("a", &daily, 700.0, t).unwrap();
  db.consume("b", &daily, 100.0, t).unwrap();
  db.consume("stranger", &daily, 999.0, t).unwrap(); // no allocation: not in the snapshot
  let dims = [
    PlanDimension {
      unit: "tokens",
      window: "daily",
      limit: 1000.0,
    },
    PlanDimension {
      unit: "tokens",
      window: "yearly",
      limit: 1.0,
    },
    PlanDimension {
      unit: "bytes",
      window: "daily",
      limit: 1.0,
    },
    PlanDimension {
      unit: "requests",
      window: "hourly",
      limit: 10.0,
    },
  ];
  let snap = db.pool_usage_with_dimensions(&pool.id, &dims, t).unwrap();
  assert_eq!(snap.pool_id, pool.id);
  assert_eq!(snap.dimensions.len(), 2);
  let d = &snap.dimensions[0];
  assert_eq!(
    (d.unit, d.window, d.limit),
    (QuotaUnit::Tokens, QuotaWindow::Daily, 1000.0)
  );
  assert_eq!(d.consumed_total, 800.0);
  let rows: Vec<(&str, f64, f64, f64, bool)> = d
    .per_key
    .iter()
    .map(|k| {
      (
        k.api_key_id.as_str(),
        k.consumed,
        k.fair_share,
        k.deficit,
        k.borrowing,
      )
    })
    .collect();
  assert_eq!(
    rows,
    vec![
      ("a", 700.0, 600.0, 100.0, true),
      ("b", 100.0, 400.0, -300.0, false),
      ("idle", 0.0, 0.0, 0.0, false),
    ]
  );
  assert_eq!(snap.dimensions[1].consumed_total, 0.0);
  // A pool whose weights are all 0: every fair share is 0.
  let zero = db
    .create_pool(&new_pool("c", vec![alloc("a", 0.0), alloc("b", 0.0)]), NOW)
    .unwrap();
  let zk = store_support::key(&zero.id, QuotaUnit::Tokens, QuotaWindow::Daily);
  db.consume("a", &zk, 5.0, t).unwrap();
  let snap = db
    .pool_usage_with_dimensions(&zero.id, &dims[..1], t)
    .unwrap();
  let per_key = &snap.dimensions[0].per_key;
  assert!(per_key.iter().all(|k| k.fair_share == 0.0));
  assert!(per_key[0].borrowing && !per_key[1].borrowing);
  assert_eq!(per_key[0].deficit, 5.0);
  // Unknown pool: no dimensions.
  let none = db.pool_usage_with_dimensions("missing", &dims, t).unwrap();
  assert!(none.dimensions.is_empty());
}

/// The store's checks on their own: the field named from the list's path, amounts
/// saturated into `0..=COUNTER_MAX`.
#[test]
fn the_checks_name_the_field_and_saturate() {
  use omniroute_quota_engine::store::validate::*;
  let range_field = |err: QuotaError| match err {
    QuotaError::InvalidArg {
      kind: ArgErrorKind::Range,
      field,
      ..
    } => field,
    other => panic!("unexpected {other:?}"),
  };
  let ok = alloc("a", 50.0);
  assert!(allocations(std::slice::from_ref(&ok), "allocations").is_ok());
  let mut capped = alloc("b", 1.0);
  capped.cap_value = Some(0.0);
  for (bad, expected) in [
    (alloc("b", 100.5), "allocations[1].weight"),
    (alloc("b", -0.1), "allocations[1].weight"),
    (alloc("b", f64::NAN), "allocations[1].weight"),
    (capped, "allocations[1].capValue"),
    (alloc("", 1.0), "allocations[1].apiKeyId"),
    (alloc("a", 1.0), "allocations[1].apiKeyId"),
  ] {
    let err = allocations(&[ok.clone(), bad], "allocations").unwrap_err();
    assert_eq!(range_field(err), expected);
  }
  assert!(cost(0.0, "cost").is_ok() && finite(-3.0, "delta").is_ok());
  assert_eq!(range_field(cost(-1.0, "cost").unwrap_err()), "cost");
  assert_eq!(
    range_field(cost(f64::INFINITY, "cost").unwrap_err()),
    "cost"
  );
  assert_eq!(range_field(finite(f64::NAN, "delta").unwrap_err()), "delta");
  assert_eq!(range_field(positive(0.0, "x").unwrap_err()), "x");
  assert_eq!(range_field(non_empty("", "id").unwrap_err()), "id");
  for (amount, saturated) in [
    (f64::INFINITY, COUNTER_MAX),
    (f64::NAN, 0.0),
    (-2.0, 0.0),
    (3.0, 3.0),
  ] {
    assert_eq!(saturate(amount), saturated);
  }
}

/// Numbers in messages read as JavaScript's `String(n)` writes them.
#[test]
fn numbers_in_messages_read_as_javascript_writes_them() {
  use omniroute_quota_engine::error::JsNumber;
  for (n, js) in [
    (f64::INFINITY, "Infinity"),
    (f64::NEG_INFINITY, "-Infinity"),
    (f64::NAN, "NaN"),
    (-0.0, "0"),
    (1000.0, "1000"),
    (0.1 + 0.2, "0.30000000000000004"),
    (0.000001, "0.000001"),
    (1.5e-7, "1.5e-7"),
    (-1e21, "-1e+21"),
    (123456789012345680000.0, "123456789012345680000"),
  ] {
    assert_eq!(JsNumber(n).to_string(), js);
  }
}
