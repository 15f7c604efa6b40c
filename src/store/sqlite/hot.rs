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
//! Every read of a counter or a pool total also adds what `record_buffer.rs` holds.

use super::wal_index::{WalIndexView, WalToken};
use super::SqliteDb;
use crate::core::dimensions::DimensionKey;
use crate::core::enforce::Buckets;
use crate::error::Result;
use crate::store::validate::COUNTER_MAX;
use std::collections::HashMap;
use std::fmt::Write as _;

/// Cached counter entries before the cache is emptied (a bound, not an eviction policy).
const MAX_CACHED_COUNTERS: usize = 10_000;

/// The hot path's state, next to the connection.
#[derive(Debug, Default)]
pub(crate) struct HotState {
  pub(super) wal: WalIndexView,
  /// The header taken before the read that last filled `counters` and checked the
  /// metadata; `None`: nothing is known to be current.
  token: Option<WalToken>,
  /// Inside a hot scope: counter reads go through `counters`.
  active: bool,
  /// `(curr, prev)` as read from the database (buffered writes not included), keyed by
  /// `k \0 apiKeyId \0 dimensionKey \0 current` or `p \0 dimensionKey \0 current`.
  counters: HashMap<String, (f64, f64)>,
  scratch: String,
}

impl HotState {
  /// Nothing cached is known to be current any more.
  pub(super) fn invalidate(&mut self) {
    self.token = None;
    self.counters.clear();
  }
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
    let current = token.is_some() && self.hot.borrow().token == token;
    let _guard = HotGuard(self);
    if current {
      self.hot.borrow_mut().active = true;
      // The metadata was checked under this same header: skip its freshness check.
      self.cache.borrow_mut().scope_fresh = true;
      return f(self);
    }
    {
      let mut hot = self.hot.borrow_mut();
      hot.invalidate();
      hot.active = true;
    }
    let result = self.read_scope(|db| {
      let value = f(db)?;
      db.hot.borrow_mut().wal.refresh(&db.conn);
      Ok(value)
    });
    if result.is_ok() {
      self.hot.borrow_mut().token = token;
    }
    result
  }

  /// Whether the last hot scope ran from memory (tests and diagnostics): the header has
  /// not moved since the cache was filled.
  pub fn hot_cache_current(&self) -> bool {
    let hot = self.hot.borrow();
    let token = hot.wal.token();
    token.is_some() && hot.token == token
  }

  /// One key's `(curr, prev)` from the database, through the counter cache inside a hot
  /// scope, plus what is buffered.
  pub(super) fn key_pair_now(
    &self,
    api_key_id: &str,
    key: &DimensionKey,
    current: i64,
  ) -> Result<Buckets> {
    let (curr, prev) = self.cached_pair(
      |out| {
        let _ = write!(out, "k\0{api_key_id}\0{key}\0{current}");
      },
      || super::counters::pair(&self.conn, api_key_id, &key.to_string(), current),
    )?;
    let (pending_curr, pending_prev) = self.pending_key_pair(api_key_id, key, current);
    // The flush saturates the sum at COUNTER_MAX: so does the read.
    Ok(Buckets {
      curr: (curr + pending_curr).min(COUNTER_MAX),
      prev: (prev + pending_prev).min(COUNTER_MAX),
    })
  }

  /// A dimension key's pool totals `(curr, prev)`, like [`SqliteDb::key_pair_now`].
  pub(super) fn totals_pair_now(&self, key: &DimensionKey, current: i64) -> Result<Buckets> {
    let (curr, prev) = self.cached_pair(
      |out| {
        let _ = write!(out, "p\0{key}\0{current}");
      },
      || {
        self.refresh_cache()?;
        super::counters::totals_pair(&self.conn, &key.to_string(), current)
      },
    )?;
    let (pending_curr, pending_prev) = self.pending_totals_pair(key, current);
    Ok(Buckets {
      curr: curr + pending_curr,
      prev: prev + pending_prev,
    })
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
      scratch.clear();
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
