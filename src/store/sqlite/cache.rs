//! The hot path's metadata cache: pools (with allocations and membership), each key's
//! pools, plan rows and model-cap rows, kept in memory between requests.
//!
//! Freshness, checked once per lookup (docs/sqlite.md#metadata-cache): `PRAGMA
//! data_version` unchanged, nothing was committed by another connection; else
//! `quota_metadata_version` (bumped by triggers whoever the writer) unchanged, the host's
//! commits left the metadata alone. A schema change drops the cache and re-applies the
//! migrations (a recreated table loses its triggers). The engine's own writes drop it
//! directly: its commits do not move its own `data_version`.
//!
//! A miss is loaded in one read transaction with the version it belongs to, so an entry
//! never mixes two states of the tables.

use super::metadata::{load_key_allocations, load_model_cap, load_plan, load_pool};
use super::values::{first, one};
use super::{migrations, SqliteDb, StoreContext};
use crate::core::dimensions::{PoolAllocation, ProviderPlan, QuotaPool};
use crate::error::Result;
use crate::store::records::ModelCap;
use rusqlite::Connection;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// The pools an API key has an allocation in, each with that allocation, pools in
/// creation order.
pub type KeyPools = Arc<[(Arc<QuotaPool>, PoolAllocation)]>;

/// Entries per map before it is emptied (a bound, not an eviction policy: metadata is
/// small and the maps refill on demand).
const MAX_ENTRIES: usize = 10_000;

#[derive(Debug, Default)]
pub(crate) struct MetadataCache {
  data_version: Option<i64>,
  meta_version: Option<i64>,
  schema_version: Option<i64>,
  pools: HashMap<String, Option<Arc<QuotaPool>>>,
  key_pools: HashMap<String, KeyPools>,
  plans: HashMap<String, Option<Arc<ProviderPlan>>>,
  /// Keyed by `pool \0 key \0 model`.
  caps: HashMap<String, Option<ModelCap>>,
  scratch: String,
  /// Inside a `read_scope`/`write_scope` whose transaction already checked freshness: the
  /// snapshot cannot change until it ends, so further checks are skipped.
  pub(super) scope_fresh: bool,
  /// The schema changed while a transaction was open, so the migration could not run:
  /// the scope must retry outside its transaction.
  pub(super) migration_pending: bool,
}

impl MetadataCache {
  fn clear_entries(&mut self) {
    self.pools.clear();
    self.key_pools.clear();
    self.plans.clear();
    self.caps.clear();
  }
}

/// Writes `pool \0 key \0 model` into `out` (reused: no allocation on a hit).
fn fill_cap_key(out: &mut String, pool_id: &str, api_key_id: &str, model: &str) {
  out.clear();
  out.push_str(pool_id);
  out.push('\0');
  out.push_str(api_key_id);
  out.push('\0');
  out.push_str(model);
}

/// A longer key is looked up but not kept: a cap's key holds the request's model name, and
/// [`MAX_ENTRIES`] names of a hostile length would hold gigabytes.
const MAX_KEY_BYTES: usize = 1024;

fn bounded_insert<V>(map: &mut HashMap<String, V>, key: &str, value: V) {
  if key.len() <= MAX_KEY_BYTES {
    if map.len() >= MAX_ENTRIES {
      map.clear();
    }
    map.insert(key.to_string(), value);
  }
}

/// `(quota_metadata_version.version, schema_version)`; the version is `None` when its row
/// is missing (then nothing is cached until a trigger recreates it).
fn versions(conn: &Connection) -> Result<(Option<i64>, i64)> {
  let sql = "SELECT (SELECT version FROM quota_metadata_version WHERE id = 1),
    (SELECT schema_version FROM pragma_schema_version)";
  let found = first(conn, sql, [], |row| row.try_into()).ctx("reading the metadata version")?;
  Ok(found.unwrap_or((None, 0)))
}

impl SqliteDb {
  /// Drops every cached metadata entry (after the engine's own metadata writes).
  pub fn invalidate_metadata(&self) {
    let mut cache = self.cache.borrow_mut();
    cache.clear_entries();
    cache.meta_version = None;
    self.hot.borrow_mut().invalidate();
  }

  /// How many metadata entries are cached (diagnostics and tests).
  pub fn cache_entries(&self) -> usize {
    let cache = self.cache.borrow();
    cache.pools.len() + cache.key_pools.len() + cache.plans.len() + cache.caps.len()
  }

  /// The freshness check described in the module documentation.
  pub(super) fn refresh_cache(&self) -> Result<()> {
    if self.cache.borrow().scope_fresh {
      return Ok(());
    }
    let data_version: i64 =
      one(&self.conn, "PRAGMA data_version", []).ctx("reading data_version")?;
    {
      let cache = self.cache.borrow();
      if cache.data_version == Some(data_version) && cache.meta_version.is_some() {
        return Ok(());
      }
    }
    let (mut meta_version, mut schema_version) = versions(&self.conn)?;
    let schema_changed = {
      let cache = self.cache.borrow();
      cache.schema_version.is_some_and(|v| v != schema_version)
    };
    if schema_changed && !self.conn.is_autocommit() {
      // Inside a transaction the migration cannot run: leave the recorded versions as
      // they are, so the check fires again outside it, and tell the scope.
      let mut cache = self.cache.borrow_mut();
      cache.clear_entries();
      cache.migration_pending = true;
      return Ok(());
    }
    if schema_changed && migrations::ensure_schema(&self.conn)? {
      (meta_version, schema_version) = versions(&self.conn)?;
    }
    let mut cache = self.cache.borrow_mut();
    if schema_changed || meta_version.is_none() || cache.meta_version != meta_version {
      cache.clear_entries();
    }
    cache.data_version = Some(data_version);
    cache.meta_version = meta_version;
    cache.schema_version = Some(schema_version);
    Ok(())
  }

  /// Runs `load` in one read transaction with the metadata version it sees; if that
  /// version is not the cache's, the cache is emptied and takes it (the loaded value is
  /// then the first entry of the new version).
  fn load_consistent<T>(&self, load: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    let (meta_version, value) = self.in_read(|conn| {
      let (meta_version, _) = versions(conn)?;
      Ok((meta_version, load(conn)?))
    })?;
    let mut cache = self.cache.borrow_mut();
    if cache.meta_version != meta_version || meta_version.is_none() {
      cache.clear_entries();
      cache.meta_version = meta_version;
    }
    Ok(value)
  }

  /// Whether entries may be stored (the version row exists).
  fn cacheable(&self) -> bool {
    self.cache.borrow().meta_version.is_some()
  }

  /// `map`'s entry for `key`, or `load`ed (see [`SqliteDb::load_consistent`]) and kept.
  fn cached<V: Clone>(
    &self,
    map: fn(&mut MetadataCache) -> &mut HashMap<String, V>,
    key: &str,
    load: impl FnOnce(&Connection) -> Result<V>,
  ) -> Result<V> {
    self.refresh_cache()?;
    if let Some(hit) = map(&mut self.cache.borrow_mut()).get(key) {
      return Ok(hit.clone());
    }
    let value = self.load_consistent(load)?;
    if self.cacheable() {
      bounded_insert(map(&mut self.cache.borrow_mut()), key, value.clone());
    }
    Ok(value)
  }

  /// A whole pool by id, cached.
  pub fn cached_pool(&self, pool_id: &str) -> Result<Option<Arc<QuotaPool>>> {
    self.cached(
      |c| &mut c.pools,
      pool_id,
      |conn| Ok(load_pool(conn, pool_id)?.map(Arc::new)),
    )
  }

  /// Every pool `api_key_id` has an allocation in, fully loaded, with that allocation;
  /// pools in creation order. Cached.
  pub fn pools_for_api_key(&self, api_key_id: &str) -> Result<KeyPools> {
    let pools = self.cached(
      |c| &mut c.key_pools,
      api_key_id,
      |conn| {
        let mut out = Vec::new();
        for (pool_id, allocation) in load_key_allocations(conn, api_key_id)? {
          let cached = self.cache.borrow().pools.get(&pool_id).cloned();
          let pool = match cached {
            Some(pool) => pool,
            None => load_pool(conn, &pool_id)?.map(Arc::new),
          };
          if let Some(pool) = pool {
            out.push((pool, allocation));
          }
        }
        Ok(out.into())
      },
    )?;
    if self.cacheable() {
      let mut cache = self.cache.borrow_mut();
      for (pool, _) in pools.iter() {
        if !cache.pools.contains_key(&pool.id) {
          bounded_insert(&mut cache.pools, &pool.id, Some(pool.clone()));
        }
      }
    }
    Ok(pools)
  }

  /// docs/contract.md §7 step 1: the first of the key's pools whose member connections include
  /// `connection_id` (legacy pools: whose primary is it), with the key's allocation.
  pub fn match_pool(
    &self,
    api_key_id: &str,
    connection_id: &str,
  ) -> Result<Option<(Arc<QuotaPool>, PoolAllocation)>> {
    Ok(
      self
        .pools_for_api_key(api_key_id)?
        .iter()
        .find(|(pool, _)| pool.connection_ids.iter().any(|c| c == connection_id))
        .cloned(),
    )
  }

  /// The stored plan row of a connection, cached.
  pub fn cached_provider_plan(&self, connection_id: &str) -> Result<Option<Arc<ProviderPlan>>> {
    self.cached(
      |c| &mut c.plans,
      connection_id,
      |conn| Ok(load_plan(conn, connection_id)?.map(Arc::new)),
    )
  }

  /// The model-cap row of `(pool, key, model)`, cached.
  pub fn cached_model_cap(
    &self,
    pool_id: &str,
    api_key_id: &str,
    model: &str,
  ) -> Result<Option<ModelCap>> {
    self.refresh_cache()?;
    {
      let mut cache = self.cache.borrow_mut();
      let MetadataCache { scratch, caps, .. } = &mut *cache;
      fill_cap_key(scratch, pool_id, api_key_id, model);
      if let Some(hit) = caps.get(scratch.as_str()) {
        return Ok(hit.clone());
      }
    }
    let cap = self.load_consistent(|conn| load_model_cap(conn, pool_id, api_key_id, model))?;
    if self.cacheable() {
      let mut cache = self.cache.borrow_mut();
      let MetadataCache { scratch, caps, .. } = &mut *cache;
      fill_cap_key(scratch, pool_id, api_key_id, model);
      bounded_insert(caps, scratch, cap.clone());
    }
    Ok(cap)
  }
}
