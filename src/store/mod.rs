//! The two counter stores, plus the host's metadata (pools, allocations, plans, model caps)
//! and the migrations. No `napi` and no engine here: the engine reaches these through its
//! `QuotaDriver` trait (`engine/driver.rs`), whose SQLite and Redis implementations call
//! them.
//!
//! - [`CounterStore`]: the sliding-window counters of docs/contract.md §2/§4, implemented by
//!   [`sqlite::SqliteDb`]; the Redis store ([`redis`]) has the same operations, async.
//! - [`sqlite`]: the SQLite driver — one long-lived connection per database file (the
//!   engine holds its one, `engine/database.rs`), with locks that cannot hurt the host's
//!   own SQLite copy (see `sqlite/locks.rs`).
//! - [`redis`]: the Redis driver — counters only, one multiplexed connection per URL.
//! - [`records`], [`usage`]: the plain values the store takes and returns.

pub mod ids;
pub mod iso_time;
pub mod records;
pub mod redis;
pub mod sqlite;
pub mod usage;
pub mod validate;

pub use records::{ConsumptionRow, LegacyPool, ModelCap, NewPool, PoolPage, PoolUpdate};
pub use sqlite::{default_db_path, OpenOptions, OpenReport, SqliteDb};
pub use usage::{DimensionUsage, KeyUsage, PlanDimension, PoolUsageSnapshot};

use crate::core::dimensions::DimensionKey;
use crate::error::Result;

/// The sliding-window counters (docs/contract.md §2, §4), whatever holds them.
///
/// Every method takes the time as `now_ms` (epoch ms) instead of reading a clock, so tests
/// can rotate buckets without sleeping. Invalid input is a `RangeError` naming the field
/// (`apiKeyId`, `cost`, `dim.poolId`) and writes nothing.
pub trait CounterStore {
  /// Adds `cost` to the current bucket of `(api_key_id, key)` and returns the new
  /// effective value (`prev × (1 − elapsed / window) + curr`), read in the same atomic
  /// operation as the write.
  fn consume(&self, api_key_id: &str, key: &DimensionKey, cost: f64, now_ms: i64) -> Result<f64>;

  /// The effective value of `(api_key_id, key)` at `now_ms`, without writing.
  fn peek(&self, api_key_id: &str, key: &DimensionKey, now_ms: i64) -> Result<f64>;

  /// The sliding formula applied to the sums of `curr` and `prev` over every API key with
  /// this dimension key. Costs the same however many keys the pool has.
  fn pool_consumed_total(&self, key: &DimensionKey, now_ms: i64) -> Result<f64>;

  /// Zeroes the counter of `(api_key_id, key)` (every bucket, so `curr` and `prev` at any
  /// time).
  fn clear(&self, api_key_id: &str, key: &DimensionKey) -> Result<()>;

  /// The effective value of every API key with a row for `key` in `curr` or `prev`.
  fn per_key_effective(&self, key: &DimensionKey, now_ms: i64) -> Result<Vec<(String, f64)>>;
}
