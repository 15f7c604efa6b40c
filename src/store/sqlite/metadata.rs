//! The host's metadata tables (docs/contract.md §5): pools, allocations, membership, provider
//! plans, per-model caps and settings — the same shapes as the host's modules,
//! synchronous.
//!
//! Writes are validated in full before their transaction starts (nothing is written on
//! invalid input) and run in one `BEGIN IMMEDIATE` transaction. Reads are lenient: rows
//! the host or a shell wrote never make a read fail (an unknown policy reads as `hard`, a
//! weight outside 0..=100 is clamped, a malformed `dimensions_json` entry is skipped).

use super::values::{exec, f64_of, first, one, rows, string_of, text};
use super::{SqliteDb, StoreContext};
use crate::core::dimensions::{
  PlanSource, Policy, PoolAllocation, ProviderPlan, QuotaDimension, QuotaPool, QuotaUnit,
};
use crate::core::plans::parse_plan_dimensions_lenient;
use crate::error::{QuotaError, Result};
use crate::store::ids::new_uuid_v4;
use crate::store::iso_time::{iso_from_ms, normalize_sqlite_timestamp};
use crate::store::records::{LegacyPool, ModelCap, NewPool, PoolPage, PoolUpdate};
use crate::store::validate;
use rusqlite::{params, Connection, Row};
use std::collections::HashSet;

/// `groupId` of a pool whose `group_id` is empty or NULL.
pub const DEFAULT_GROUP_ID: &str = "group-demo";

// ----- reading ---------------------------------------------------------------------------

const SELECT_POOL: &str =
  "SELECT id, connection_id, name, created_at, group_id FROM quota_pools WHERE id = ?1";
const SELECT_ALLOCATIONS: &str = "SELECT api_key_id, weight, cap_value, cap_unit, policy
  FROM quota_allocations WHERE pool_id = ?1 ORDER BY rowid";
const SELECT_MEMBERS: &str = "SELECT connection_id FROM quota_pool_connections
  WHERE pool_id = ?1 ORDER BY created_at, rowid";
const SELECT_KEY_ALLOCATIONS: &str =
  "SELECT a.pool_id, a.api_key_id, a.weight, a.cap_value, a.cap_unit, a.policy
  FROM quota_allocations a LEFT JOIN quota_pools p ON p.id = a.pool_id
  WHERE a.api_key_id = ?1
  ORDER BY p.rowid IS NULL, p.rowid, a.rowid";
const SELECT_PLAN: &str = "SELECT connection_id, provider, dimensions_json, source
  FROM provider_plans WHERE connection_id = ?1";
const SELECT_MODEL_CAP: &str = "SELECT cap_value, cap_unit FROM quota_allocation_model_caps
  WHERE pool_id = ?1 AND api_key_id = ?2 AND model = ?3";

/// An allocation from the columns `api_key_id, weight, cap_value, cap_unit, policy`
/// starting at `at`.
fn allocation_from_row(row: &Row<'_>, at: usize) -> rusqlite::Result<PoolAllocation> {
  let weight = f64_of(row.get_ref(at + 1)?)
    .filter(|w| !w.is_nan())
    .unwrap_or(0.0)
    .clamp(0.0, 100.0);
  Ok(PoolAllocation {
    api_key_id: text(row, at)?,
    weight,
    cap_value: f64_of(row.get_ref(at + 2)?).filter(|v| v.is_finite()),
    cap_unit: string_of(row.get_ref(at + 3)?).and_then(|u| QuotaUnit::parse(&u)),
    policy: string_of(row.get_ref(at + 4)?)
      .map(|p| Policy::parse_lenient(&p))
      .unwrap_or(Policy::Hard),
  })
}

/// A whole pool (allocations and membership included), or `None`. Its members are its
/// membership rows by `created_at`, or `[primary]`.
pub(super) fn load_pool(conn: &Connection, id: &str) -> Result<Option<QuotaPool>> {
  let head = first(conn, SELECT_POOL, [id], |row| {
    Ok((
      text(row, 0)?,
      text(row, 1)?,
      text(row, 2)?,
      text(row, 3)?,
      string_of(row.get_ref(4)?).filter(|g| !g.is_empty()),
    ))
  })
  .ctx("reading a pool")?;
  let Some((id, connection_id, name, created_at, group_id)) = head else {
    return Ok(None);
  };
  let allocations = rows(conn, SELECT_ALLOCATIONS, [&id], |row| {
    allocation_from_row(row, 0)
  })
  .ctx("reading allocations")?;
  let members =
    rows(conn, SELECT_MEMBERS, [&id], |row| text(row, 0)).ctx("reading pool connections")?;
  Ok(Some(QuotaPool {
    connection_ids: if members.is_empty() {
      vec![connection_id.clone()]
    } else {
      members
    },
    allocations,
    created_at: normalize_sqlite_timestamp(&created_at),
    group_id: group_id.unwrap_or_else(|| DEFAULT_GROUP_ID.to_string()),
    name,
    connection_id,
    id,
  }))
}

/// Every allocation of `api_key_id` with its pool id, pools in creation order.
pub(super) fn load_key_allocations(
  conn: &Connection,
  api_key_id: &str,
) -> Result<Vec<(String, PoolAllocation)>> {
  rows(conn, SELECT_KEY_ALLOCATIONS, [api_key_id], |row| {
    Ok((text(row, 0)?, allocation_from_row(row, 1)?))
  })
  .ctx("reading allocations")
}

/// The stored plan of a connection; `dimensions_json` parsed leniently (a value that is
/// not JSON gives no dimensions, never an error).
pub(super) fn load_plan(conn: &Connection, connection_id: &str) -> Result<Option<ProviderPlan>> {
  first(conn, SELECT_PLAN, [connection_id], |row| {
    Ok(ProviderPlan {
      connection_id: string_of(row.get_ref(0)?),
      provider: text(row, 1)?,
      dimensions: parse_plan_dimensions_lenient(&text(row, 2)?),
      source: string_of(row.get_ref(3)?)
        .and_then(|s| PlanSource::parse(&s))
        .unwrap_or(PlanSource::Manual),
    })
  })
  .ctx("reading a provider plan")
}

/// The cap row of `(pool, key, model)`; a row whose unit is not a known unit, or whose
/// value is not a number, reads as no cap.
pub(super) fn load_model_cap(
  conn: &Connection,
  pool_id: &str,
  api_key_id: &str,
  model: &str,
) -> Result<Option<ModelCap>> {
  let row = first(
    conn,
    SELECT_MODEL_CAP,
    [pool_id, api_key_id, model],
    |row| {
      let unit = string_of(row.get_ref(1)?).and_then(|u| QuotaUnit::parse(&u));
      Ok((f64_of(row.get_ref(0)?), unit))
    },
  );
  Ok(match row.ctx("reading a model cap")? {
    Some((Some(cap_value), Some(cap_unit))) if !cap_value.is_nan() => Some(ModelCap {
      pool_id: pool_id.to_string(),
      api_key_id: api_key_id.to_string(),
      model: model.to_string(),
      cap_value,
      cap_unit,
    }),
    _ => None,
  })
}

// ----- writing ---------------------------------------------------------------------------

/// Replaces the allocations of `pool_id` with `list`.
fn replace_allocations(tx: &Connection, pool_id: &str, list: &[PoolAllocation]) -> Result<()> {
  let sql = "DELETE FROM quota_allocations WHERE pool_id = ?1";
  exec(tx, sql, [pool_id]).ctx("replacing allocations")?;
  let mut stmt = tx
    .prepare_cached(
      "INSERT INTO quota_allocations (pool_id, api_key_id, weight, cap_value, cap_unit, policy)
       VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .ctx("writing allocations")?;
  for a in list {
    stmt
      .execute(params![
        pool_id,
        a.api_key_id,
        a.weight,
        a.cap_value,
        a.cap_unit.map(QuotaUnit::as_str),
        a.policy.as_str()
      ])
      .ctx("writing allocations")?;
  }
  Ok(())
}

fn replace_members(
  tx: &Connection,
  pool_id: &str,
  members: &[String],
  created_at: &str,
) -> Result<()> {
  let sql = "DELETE FROM quota_pool_connections WHERE pool_id = ?1";
  exec(tx, sql, [pool_id]).ctx("replacing pool connections")?;
  let mut stmt = tx
    .prepare_cached(
      "INSERT INTO quota_pool_connections (pool_id, connection_id, created_at) VALUES (?1, ?2, ?3)",
    )
    .ctx("writing pool connections")?;
  for member in members {
    stmt
      .execute(params![pool_id, member, created_at])
      .ctx("writing pool connections")?;
  }
  Ok(())
}

/// `[primary] ∪ others`, primary first, first occurrence wins.
fn membership(primary: &str, others: &[String]) -> Vec<String> {
  let mut seen = HashSet::new();
  std::iter::once(primary)
    .chain(others.iter().map(String::as_str))
    .filter(|c| seen.insert(*c))
    .map(str::to_string)
    .collect()
}

/// The primary connection of pool `id`, when it exists.
fn pool_primary(conn: &Connection, id: &str) -> Result<Option<String>> {
  let sql = "SELECT connection_id FROM quota_pools WHERE id = ?1";
  first(conn, sql, [id], |row| text(row, 0)).ctx("reading a pool")
}

fn pool_count(conn: &Connection) -> Result<i64> {
  one(conn, "SELECT COUNT(*) FROM quota_pools", []).ctx("counting pools")
}

/// Inserts `pool` with its allocations and membership (primary first).
fn insert_pool(tx: &Connection, pool: &LegacyPool, created_at: &str) -> Result<()> {
  // No group is the host's default group, written out as the host's module writes it.
  let group_id = (pool.group_id.as_deref()).filter(|group| !group.is_empty());
  let group_id = group_id.unwrap_or(DEFAULT_GROUP_ID);
  exec(
    tx,
    "INSERT INTO quota_pools (id, connection_id, name, created_at, group_id) VALUES (?1, ?2, ?3, ?4, ?5)",
    params![pool.id, pool.connection_id, pool.name, created_at, group_id],
  )
  .ctx("writing a pool")?;
  replace_allocations(tx, &pool.id, &pool.allocations)?;
  let members = membership(&pool.connection_id, &pool.connection_ids);
  replace_members(tx, &pool.id, &members, created_at)
}

fn dimensions_json(dimensions: &[QuotaDimension]) -> String {
  serde_json::Value::Array(
    dimensions
      .iter()
      .map(|d| {
        serde_json::json!({ "unit": d.unit.as_str(), "window": d.window.as_str(), "limit": d.limit })
      })
      .collect(),
  )
  .to_string()
}

impl SqliteDb {
  fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    let value = self.in_write(f)?;
    self.invalidate_metadata();
    Ok(value)
  }

  /// `createPool(...)`: a new pool with a random UUID, `createdAt` = `now_ms` as ISO-8601,
  /// its allocations and its membership (primary first) in one transaction.
  pub fn create_pool(&self, input: &NewPool, now_ms: i64) -> Result<QuotaPool> {
    validate::non_empty(&input.connection_id, "input.connectionId")?;
    validate::non_empty(&input.name, "input.name")?;
    validate::allocations(&input.allocations, "input.allocations")?;
    validate::connection_ids(&input.connection_ids, "input.connectionIds")?;
    let pool = LegacyPool {
      id: new_uuid_v4(),
      connection_id: input.connection_id.clone(),
      name: input.name.clone(),
      group_id: input.group_id.clone(),
      created_at: None,
      allocations: input.allocations.clone(),
      connection_ids: input.connection_ids.clone(),
    };
    self.write(|tx| {
      insert_pool(tx, &pool, &iso_from_ms(now_ms))?;
      load_pool(tx, &pool.id)?.ok_or_else(|| QuotaError::Store("the new pool vanished".into()))
    })
  }

  /// `getPool(id)`: the pool with its allocations and member connections, or `None`.
  pub fn get_pool(&self, id: &str) -> Result<Option<QuotaPool>> {
    Ok(self.cached_pool(id)?.map(|p| (*p).clone()))
  }

  /// `listPools({ limit?, offset? })`: pools in creation order; `limit` `None` = all.
  pub fn list_pools(&self, limit: Option<u32>, offset: Option<u32>) -> Result<PoolPage> {
    self.in_read(|conn| {
      let total = pool_count(conn)?;
      let ids = rows(
        conn,
        "SELECT id FROM quota_pools ORDER BY rowid LIMIT ?1 OFFSET ?2",
        params![limit.map_or(-1, i64::from), i64::from(offset.unwrap_or(0))],
        |row| text(row, 0),
      )
      .ctx("listing pools")?;
      let mut items = Vec::with_capacity(ids.len());
      for id in ids {
        items.extend(load_pool(conn, &id)?);
      }
      Ok(PoolPage {
        items,
        total: total.max(0) as u64,
      })
    })
  }

  /// `updatePool(id, patch)`: `None` when the pool does not exist. See [`PoolUpdate`] for
  /// how `connection_ids` sets the primary.
  pub fn update_pool(
    &self,
    id: &str,
    patch: &PoolUpdate,
    now_ms: i64,
  ) -> Result<Option<QuotaPool>> {
    if let Some(name) = &patch.name {
      validate::non_empty(name, "patch.name")?;
    }
    if let Some(list) = &patch.allocations {
      validate::allocations(list, "patch.allocations")?;
    }
    if let Some(list) = &patch.connection_ids {
      validate::connection_ids(list, "patch.connectionIds")?;
    }
    self.write(|tx| {
      let Some(primary) = pool_primary(tx, id)? else {
        return Ok(None);
      };
      let set = |column: &str, value: &str| {
        let sql = format!("UPDATE quota_pools SET {column} = ?2 WHERE id = ?1");
        exec(tx, &sql, params![id, value]).ctx("updating a pool")
      };
      if let Some(name) = &patch.name {
        set("name", name)?;
      }
      if let Some(group_id) = &patch.group_id {
        set("group_id", group_id)?;
      }
      if let Some(list) = &patch.allocations {
        replace_allocations(tx, id, list)?;
      }
      if let Some(list) = &patch.connection_ids {
        let members = if list.is_empty() {
          Vec::new()
        } else if list.contains(&primary) {
          membership(&primary, list)
        } else {
          set("connection_id", &list[0])?;
          membership(&list[0], list)
        };
        replace_members(tx, id, &members, &iso_from_ms(now_ms))?;
      }
      load_pool(tx, id)
    })
  }

  /// `deletePool(id)`: the pool, its allocations, membership rows and model caps.
  /// `false` when there was no such pool.
  pub fn delete_pool(&self, id: &str) -> Result<bool> {
    self.write(|tx| {
      let mut deleted = 0;
      for table in [
        "quota_allocation_model_caps WHERE pool_id",
        "quota_pool_connections WHERE pool_id",
        "quota_allocations WHERE pool_id",
        "quota_pools WHERE id",
      ] {
        deleted = exec(tx, &format!("DELETE FROM {table} = ?1"), [id]).ctx("deleting a pool")?;
      }
      Ok(deleted > 0)
    })
  }

  /// `upsertAllocations(poolId, allocations)`: replaces the pool's allocation set.
  /// `false` (nothing written) when the pool does not exist.
  pub fn upsert_allocations(&self, pool_id: &str, allocations: &[PoolAllocation]) -> Result<bool> {
    validate::non_empty(pool_id, "poolId")?;
    validate::allocations(allocations, "allocations")?;
    self.write(|tx| {
      let exists = pool_primary(tx, pool_id)?.is_some();
      if exists {
        replace_allocations(tx, pool_id, allocations)?;
      }
      Ok(exists)
    })
  }

  /// `listAllocationsForApiKey(apiKeyId)`: `(poolId, allocation)` pairs, pools in creation
  /// order.
  pub fn list_allocations_for_api_key(
    &self,
    api_key_id: &str,
  ) -> Result<Vec<(String, PoolAllocation)>> {
    load_key_allocations(&self.conn, api_key_id)
  }

  /// `getProviderPlan(connectionId)`.
  pub fn get_provider_plan(&self, connection_id: &str) -> Result<Option<ProviderPlan>> {
    let plan = self.cached_provider_plan(connection_id)?;
    Ok(plan.map(|p| (*p).clone()))
  }

  /// `upsertProviderPlan({ connectionId, provider, dimensions, source })`: inserts or
  /// replaces the connection's plan; returns it as stored.
  pub fn upsert_provider_plan(&self, plan: &ProviderPlan, now_ms: i64) -> Result<ProviderPlan> {
    let connection_id = plan.connection_id.as_deref().unwrap_or("");
    validate::non_empty(connection_id, "plan.connectionId")?;
    validate::non_empty(&plan.provider, "plan.provider")?;
    validate::dimensions(&plan.dimensions, "plan.dimensions")?;
    let json = dimensions_json(&plan.dimensions);
    let (source, updated_at) = (plan.source.as_str(), iso_from_ms(now_ms));
    self.write(|tx| {
      exec(
        tx,
        "INSERT INTO provider_plans (connection_id, provider, dimensions_json, source, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (connection_id) DO UPDATE SET provider = excluded.provider,
           dimensions_json = excluded.dimensions_json, source = excluded.source,
           updated_at = excluded.updated_at",
        params![connection_id, plan.provider, json, source, updated_at],
      )
      .ctx("writing a provider plan")
    })?;
    Ok(plan.clone())
  }

  /// `deleteProviderPlan(connectionId)`: `false` when there was none.
  pub fn delete_provider_plan(&self, connection_id: &str) -> Result<bool> {
    let sql = "DELETE FROM provider_plans WHERE connection_id = ?1";
    self.write(|tx| Ok(exec(tx, sql, [connection_id]).ctx("deleting a provider plan")? > 0))
  }

  /// `getModelCap(poolId, apiKeyId, model)`.
  pub fn get_model_cap(
    &self,
    pool_id: &str,
    api_key_id: &str,
    model: &str,
  ) -> Result<Option<ModelCap>> {
    self.cached_model_cap(pool_id, api_key_id, model)
  }

  /// `setModelCap(cap)`: inserts or replaces the cap of `(pool, key, model)`.
  pub fn set_model_cap(&self, cap: &ModelCap) -> Result<ModelCap> {
    validate::non_empty(&cap.pool_id, "cap.poolId")?;
    validate::non_empty(&cap.api_key_id, "cap.apiKeyId")?;
    validate::non_empty(&cap.model, "cap.model")?;
    validate::positive(cap.cap_value, "cap.capValue")?;
    let ModelCap {
      pool_id,
      api_key_id,
      model,
      cap_value,
      cap_unit,
    } = cap;
    self.write(|tx| {
      exec(
        tx,
        "INSERT INTO quota_allocation_model_caps (pool_id, api_key_id, model, cap_value, cap_unit)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (pool_id, api_key_id, model) DO UPDATE SET cap_value = excluded.cap_value,
           cap_unit = excluded.cap_unit",
        params![pool_id, api_key_id, model, cap_value, cap_unit.as_str()],
      )
      .ctx("writing a model cap")
    })?;
    Ok(cap.clone())
  }

  /// `deleteModelCap(poolId, apiKeyId, model)`: `false` when there was none.
  pub fn delete_model_cap(&self, pool_id: &str, api_key_id: &str, model: &str) -> Result<bool> {
    let sql =
      "DELETE FROM quota_allocation_model_caps WHERE pool_id = ?1 AND api_key_id = ?2 AND model = ?3";
    self
      .write(|tx| Ok(exec(tx, sql, [pool_id, api_key_id, model]).ctx("deleting a model cap")? > 0))
  }

  /// `importLegacyPools(pools)`: writes every pool (ids kept) when no pool exists yet and
  /// returns how many; otherwise writes nothing and returns 0. All or nothing.
  pub fn import_legacy_pools(&self, pools: &[LegacyPool], now_ms: i64) -> Result<usize> {
    let mut ids = HashSet::with_capacity(pools.len());
    for (i, pool) in pools.iter().enumerate() {
      let at = |field: &str| format!("pools[{i}].{field}");
      validate::non_empty(&pool.id, &at("id"))?;
      if pool.id.contains(':') {
        // A counter's dimension key is `<poolId>:<unit>:<window>` and a model cap's
        // `<poolId>:model:<model>:…` (docs/redis.md#key-names): a `:` makes it ambiguous.
        return Err(QuotaError::range_error(
          at("id"),
          format!(
            "pool id {:?} must not contain ':' (it separates the parts of a counter's key)",
            pool.id
          ),
        ));
      }
      if !ids.insert(pool.id.as_str()) {
        return Err(QuotaError::range_error(
          at("id"),
          format!("duplicate pool id {:?}", pool.id),
        ));
      }
      validate::non_empty(&pool.connection_id, &at("connectionId"))?;
      validate::non_empty(&pool.name, &at("name"))?;
      validate::allocations(&pool.allocations, &at("allocations"))?;
      validate::connection_ids(&pool.connection_ids, &at("connectionIds"))?;
    }
    let now = iso_from_ms(now_ms);
    self.write(|tx| {
      if pool_count(tx)? > 0 {
        return Ok(0);
      }
      for pool in pools {
        let created_at = pool.created_at.as_deref().filter(|c| !c.is_empty());
        insert_pool(tx, pool, created_at.unwrap_or(&now))?;
      }
      Ok(pools.len())
    })
  }

  /// The host's setting `(namespace, key)` from `key_value` (e.g. `settings`/`quotaStore`),
  /// as stored (text), or `None`.
  pub fn read_setting(&self, namespace: &str, key: &str) -> Result<Option<String>> {
    let sql = "SELECT value FROM key_value WHERE namespace = ?1 AND key = ?2";
    let value = first(&self.conn, sql, [namespace, key], |row| {
      Ok(string_of(row.get_ref(0)?))
    });
    Ok(value.ctx("reading a setting")?.flatten())
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn membership_puts_the_primary_first_once() {
    assert_eq!(
      membership("a", &["b".into(), "a".into(), "b".into(), "c".into()]),
      ["a", "b", "c"]
    );
    assert_eq!(membership("a", &[]), ["a"]);
  }

  #[test]
  fn plan_json_round_trips() {
    use crate::core::dimensions::QuotaWindow;
    let dims = [QuotaDimension {
      unit: QuotaUnit::Tokens,
      window: QuotaWindow::FiveHours,
      limit: 1.5,
    }];
    assert_eq!(parse_plan_dimensions_lenient(&dimensions_json(&dims)), dims);
  }
}
