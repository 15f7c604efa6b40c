//! The hot path's reads from memory while nothing was committed.
//!
//! [`SqliteDb::hot_scope`] takes the wal-index header (`wal_index.rs`) before anything
//! else. Equal to the header taken before the last full read, nothing was
//! committed since — by anyone — so the metadata cache and the counters that read left
//! in [`HotState`] are current: the decision runs from memory, without a transaction.
//! Otherwise it runs in one read transaction, as before, and refills the counters under
//! the header taken *before* that transaction began: a commit between that header and the
//! transaction's snapshot only makes the next check fail, never succeed wrongly.
//!
//! When the header moved, the commits since may still have left the engine's tables alone
//! (the host's request logs): every change to an engine table rewrites a watched page — the
//! root of `quota_data_version` or `quota_metadata_version`, bumped by triggers, or page 1
//! with a moved schema cookie. When no frame committed since holds one
//! (`WalIndexView::wrote_since`), the decision still runs from memory
//! (docs/sqlite.md#decisions-that-survive-unrelated-commits). Without every version
//! trigger, any commit means a full read.
//!
//! Every read of a counter or a pool total also adds what `record_buffer.rs` holds.
//!
//! The core's decision reads the store through `core::enforce::QuotaSource`, implemented
//! here: the cached metadata (`cache.rs`) and the two-row counter reads above.

use super::record_buffer::{counter_key, totals_key};
use super::values::one;
use super::wal_index::{one_commit_after, Since, WalIndexView, WalToken};
use super::SqliteDb;
use crate::core::dimensions::{DimensionKey, PoolAllocation, ProviderPlan, QuotaPool};
use crate::core::enforce::{Buckets, ModelCapLimit, QuotaMetadata, QuotaSource};
use crate::core::plans::resolve_plan;
use crate::error::Result;
use crate::store::validate::COUNTER_MAX;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Cached counter entries before the cache is emptied (a bound, not an eviction policy):
/// about 100 bytes each. Well above the pools a process serves — a bound at the working
/// set made every key's next read a miss once it was reached.
const MAX_CACHED_COUNTERS: usize = 65_536;

/// The hot path's state, next to the connection.
#[derive(Debug, Default)]
pub(crate) struct HotState {
  pub(super) wal: WalIndexView,
  /// The header taken before the read that last filled `counters` and checked the
  /// metadata; `None`: nothing is known to be current.
  token: Option<WalToken>,
  /// The pages whose rewrite means a full read (see the module documentation); `None`:
  /// any commit does.
  watch: Option<Watch>,
  /// Hot scopes that found the header moved and still ran from memory (diagnostics).
  skipped: u64,
  /// Inside a hot scope: counter reads go through `counters`.
  active: bool,
  /// `(curr, prev)` as read from the database (buffered writes not included), keyed by
  /// `k \0 apiKeyId \0 dimensionKey \0 current` or `p \0 dimensionKey \0 current`.
  counters: FxHashMap<String, (f64, f64)>,
  /// `(schema cookie, quota_data_version)` that `counters` are current at: a full read that
  /// finds both unchanged keeps them (docs/sqlite.md#decisions-that-survive-unrelated-commits).
  counters_version: Option<(i64, i64)>,
  scratch: String,
}

/// Page 1 and the roots of the two version tables, under the schema cookie they were
/// looked up with.
#[derive(Debug, Clone, Copy)]
struct Watch {
  schema_version: i64,
  pages: [u32; 3],
}

impl HotState {
  /// Nothing cached is known to be current any more.
  pub(super) fn invalidate(&mut self) {
    self.token = None;
    self.counters.clear();
    self.counters_version = None;
  }

  /// Whether what is cached is current at header `now`: it was filled under `now`, or no
  /// frame committed since rewrote a watched page.
  fn current_at(&self, conn: &rusqlite::Connection, now: &WalToken) -> bool {
    let Some(then) = &self.token else {
      return false;
    };
    if then == now {
      return true;
    }
    match &self.watch {
      Some(watch) => {
        // PRAGMA schema_version gives the 32-bit cookie as a signed number: its bits.
        let cookie = Some(watch.schema_version as u32);
        self.wal.wrote_since(conn, then, now, &watch.pages, cookie) == Since::Untouched
      }
      None => false,
    }
  }
}

/// `quota_data_version`'s one row, `None` when it cannot be read.
pub(super) fn data_version(conn: &rusqlite::Connection) -> Option<i64> {
  let sql = "SELECT version FROM quota_data_version WHERE id = 1";
  one(conn, sql, []).ok()
}

/// The version tables' root pages and how many of the version triggers exist.
fn watch_query() -> &'static str {
  static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
  SQL.get_or_init(|| {
    let names = super::migrations::version_triggers()
      .iter()
      .map(|name| format!("'{name}'"))
      .collect::<Vec<_>>()
      .join(", ");
    format!(
      "SELECT (SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = 'quota_data_version'),
              (SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = 'quota_metadata_version'),
              (SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name IN ({names}))"
    )
  })
}

impl SqliteDb {
  /// Runs `f` — the hot path's reads — from memory when nothing was committed since the
  /// last full read, else in one read transaction that refreshes what is cached (see the
  /// module documentation). Inside an open transaction, just runs `f`.
  pub fn hot_scope<T>(&self, f: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
    if !self.conn.is_autocommit() {
      return f(self);
    }
    let token = self.hot.borrow().wal.token();
    let current = {
      let mut hot = self.hot.borrow_mut();
      let current = token.is_some_and(|now| hot.current_at(&self.conn, &now));
      if current && hot.token != token {
        hot.token = token;
        hot.skipped += 1;
      }
      current
    };
    let _guard = HotGuard(self);
    if current {
      self.hot.borrow_mut().active = true;
      // The metadata was checked under this same header: skip its freshness check.
      self.cache.borrow_mut().scope_fresh = true;
      return f(self);
    }
    {
      let mut hot = self.hot.borrow_mut();
      hot.token = None;
      hot.active = true;
    }
    let result = self.read_scope(|db| {
      db.refresh_watch();
      db.keep_or_drop_counters();
      let value = f(db)?;
      db.hot.borrow_mut().wal.refresh(&db.conn);
      Ok(value)
    });
    if result.is_ok() {
      self.hot.borrow_mut().token = token;
    }
    result
  }

  /// Inside the write transaction of a commit of buffered records (this connection holds
  /// the write lock: no one else can commit): the header now, when what is cached is
  /// current at it — the cached counters can then follow the commit instead of being
  /// dropped (see [`SqliteDb::after_own_commit`]).
  pub(super) fn before_own_commit(&self) -> Option<WalToken> {
    let hot = self.hot.borrow();
    let now = hot.wal.token()?;
    hot.current_at(&self.conn, &now).then_some(now)
  }

  /// After that commit of `rows` (`(apiKeyId, dimensionKey, bucket, delta)`): when the
  /// header moved by exactly this one commit, the cached counters and pool totals take
  /// the same additions the upsert made (saturating at `COUNTER_MAX`, as it does) and the
  /// new header becomes the reference — the next decisions run from memory instead of
  /// re-reading every key's counters after each flush
  /// (docs/sqlite.md#decisions-that-survive-unrelated-commits). Otherwise, or for a total
  /// whose growth is not known, what is cached is dropped.
  pub(super) fn after_own_commit<'a>(
    &self,
    before: Option<WalToken>,
    data_version: Option<i64>,
    rows: impl Iterator<Item = (&'a str, &'a str, i64, f64)>,
  ) {
    let mut hot = self.hot.borrow_mut();
    let after = hot.wal.token();
    let (Some(before), Some(after)) = (before, after) else {
      hot.invalidate();
      return;
    };
    if !one_commit_after(&before, &after) {
      hot.invalidate();
      return;
    }
    let HotState {
      counters, scratch, ..
    } = &mut *hot;
    for (api_key_id, dimension_key, bucket, delta) in rows {
      // The row is `curr` of the pair keyed by its bucket and `prev` of the next one's.
      let mut growth = None;
      for (current, slot) in [(bucket, 0), (bucket + 1, 1)] {
        counter_key(scratch, "k\0", api_key_id, dimension_key, current);
        if let Some(pair) = counters.get_mut(scratch.as_str()) {
          let value = if slot == 0 { &mut pair.0 } else { &mut pair.1 };
          let old = *value;
          *value = (old + delta).min(COUNTER_MAX);
          growth = Some(*value - old);
        }
      }
      for (current, slot) in [(bucket, 0), (bucket + 1, 1)] {
        totals_key(scratch, "p\0", dimension_key, current);
        let Some(pair) = counters.get_mut(scratch.as_str()) else {
          continue;
        };
        let total = if slot == 0 { &mut pair.0 } else { &mut pair.1 };
        // Unknown growth: the total is at least the counter, so without saturation it
        // grew by `delta`; near the cap it may have grown less — then it is dropped.
        match growth {
          Some(growth) => *total += growth,
          None if *total + delta <= COUNTER_MAX => *total += delta,
          None => {
            counters.remove(scratch.as_str());
          }
        }
      }
    }
    hot.token = Some(after);
    // The upserts bumped the data version: the counters are current at the new one.
    hot.counters_version = match (hot.watch, data_version) {
      (Some(watch), Some(version)) => Some((watch.schema_version, version)),
      _ => None,
    };
  }

  /// Inside a full read, before its reads: keeps the cached counters when the data version
  /// and the schema cookie are what they were current at — commits since (the WAL
  /// restarted by the host's checkpoint, a page of a version table rewritten by a metadata
  /// write) changed no counter, since every change to a counter table bumps the version in
  /// the same transaction. Otherwise, or without every version trigger, they are dropped.
  /// A restart of the WAL (about every thousand of the host's commits) then costs one read
  /// of the version row instead of a counter read for every key.
  fn keep_or_drop_counters(&self) {
    let version = self
      .hot
      .borrow()
      .watch
      .and_then(|watch| data_version(&self.conn).map(|version| (watch.schema_version, version)));
    let mut hot = self.hot.borrow_mut();
    if version.is_none() || hot.counters_version != version {
      hot.counters.clear();
    }
    hot.counters_version = version;
  }

  /// Whether the next hot scope would run from memory (tests and diagnostics): the header
  /// has not moved since the cache was filled, or only by commits that left the engine's
  /// tables alone.
  pub fn hot_cache_current(&self) -> bool {
    let hot = self.hot.borrow();
    hot
      .wal
      .token()
      .is_some_and(|now| hot.current_at(&self.conn, &now))
  }

  /// How many hot scopes ran from memory although the header had moved (diagnostics).
  pub fn hot_skips(&self) -> u64 {
    self.hot.borrow().skipped
  }

  /// Looks the watched pages up again when the schema cookie moved (inside the full read's
  /// transaction). Any failure, a missing version table or trigger: no watch, so every
  /// commit means a full read — slower, never wrong.
  fn refresh_watch(&self) {
    let Ok(schema_version) = one::<i64>(&self.conn, "PRAGMA schema_version", []) else {
      self.hot.borrow_mut().watch = None;
      return;
    };
    if self
      .hot
      .borrow()
      .watch
      .is_some_and(|w| w.schema_version == schema_version)
    {
      return;
    }
    let found: rusqlite::Result<(Option<i64>, Option<i64>, i64)> = self
      .conn
      .prepare_cached(watch_query())
      .and_then(|mut stmt| stmt.query_row([], |row| row.try_into()));
    let expected = super::migrations::version_triggers().len() as i64;
    let page = |root: Option<i64>| root.and_then(|r| u32::try_from(r).ok()).filter(|&r| r > 1);
    self.hot.borrow_mut().watch = match found {
      Ok((data, meta, triggers)) if triggers == expected => match (page(data), page(meta)) {
        (Some(data), Some(meta)) => Some(Watch {
          schema_version,
          pages: [1, data, meta],
        }),
        _ => None,
      },
      _ => None,
    };
  }

  /// One key's `(curr, prev)` from the database, through the counter cache inside a hot
  /// scope, plus what is buffered.
  pub(super) fn key_pair_now(
    &self,
    api_key_id: &str,
    key: &DimensionKey,
    current: i64,
  ) -> Result<Buckets> {
    let stored = self.cached_pair(
      |out| counter_key(out, "k\0", api_key_id, key, current),
      || super::counters::pair(&self.conn, api_key_id, &key.to_string(), current),
    )?;
    let (curr, prev) = self.with_pending_key(api_key_id, key, current, stored);
    Ok(Buckets { curr, prev })
  }

  /// A dimension key's pool totals `(curr, prev)`, like [`SqliteDb::key_pair_now`].
  pub(super) fn totals_pair_now(&self, key: &DimensionKey, current: i64) -> Result<Buckets> {
    let stored = self.cached_pair(
      |out| totals_key(out, "p\0", key, current),
      || {
        self.refresh_cache()?;
        super::counters::totals_pair(&self.conn, &key.to_string(), current)
      },
    )?;
    let (curr, prev) = self.with_pending_totals(key, current, stored);
    Ok(Buckets { curr, prev })
  }

  fn cached_pair(
    &self,
    key: impl FnOnce(&mut String),
    read: impl FnOnce() -> Result<(f64, f64)>,
  ) -> Result<(f64, f64)> {
    {
      let mut hot = self.hot.borrow_mut();
      if !hot.active {
        drop(hot);
        return read();
      }
      let HotState {
        scratch, counters, ..
      } = &mut *hot;
      key(scratch);
      if let Some(hit) = counters.get(scratch.as_str()) {
        return Ok(*hit);
      }
    }
    let value = read()?;
    let mut hot = self.hot.borrow_mut();
    let HotState {
      scratch, counters, ..
    } = &mut *hot;
    if counters.len() >= MAX_CACHED_COUNTERS {
      counters.clear();
    }
    counters.insert(scratch.clone(), value);
    Ok(value)
  }
}

/// Ends a hot scope: counter reads go to the database again, the metadata check runs again.
struct HotGuard<'a>(&'a SqliteDb);

impl Drop for HotGuard<'_> {
  fn drop(&mut self) {
    self.0.hot.borrow_mut().active = false;
    self.0.cache.borrow_mut().scope_fresh = false;
  }
}

impl QuotaMetadata for SqliteDb {
  fn match_pool(
    &self,
    api_key_id: &str,
    connection_id: &str,
  ) -> Result<Option<(Arc<QuotaPool>, PoolAllocation)>> {
    SqliteDb::match_pool(self, api_key_id, connection_id)
  }

  fn model_cap(
    &self,
    pool_id: &str,
    api_key_id: &str,
    model: &str,
  ) -> Result<Option<ModelCapLimit>> {
    let cap = self.cached_model_cap(pool_id, api_key_id, model)?;
    Ok(cap.map(|cap| ModelCapLimit {
      value: cap.cap_value,
      unit: cap.cap_unit,
    }))
  }

  fn plan(&self, connection_id: &str, provider: &str) -> Arc<ProviderPlan> {
    // `resolve_plan`'s first choice, without copying the cached row.
    if let Ok(Some(stored)) = self.cached_provider_plan(connection_id) {
      if !stored.dimensions.is_empty() {
        return stored;
      }
    }
    Arc::new(resolve_plan(None, provider))
  }
}

impl QuotaSource for SqliteDb {
  fn key_buckets(&self, api_key_id: &str, key: &DimensionKey, current: i64) -> Result<Buckets> {
    self.key_pair_now(api_key_id, key, current)
  }

  fn pool_buckets(&self, key: &DimensionKey, current: i64) -> Result<Buckets> {
    self.totals_pair_now(key, current)
  }
}
