//! The two counter stores, plus the host's metadata (pools, allocations, plans, model caps)
//! and the migrations. No `napi` and no engine here: the engine reaches these through its
//! `QuotaDriver` trait (`engine/driver.rs`), whose SQLite and Redis implementations call
//! them.
//!
//! - [`sqlite`]: the SQLite driver — one long-lived connection per database file (the
//!   engine holds its one, `engine/database.rs`), with locks that cannot hurt the host's
//!   own SQLite copy (see `sqlite/locks.rs`). The sliding-window counters of
//!   docs/contract.md §2/§4 are `SqliteDb`'s `consume`, `peek`, `pool_consumed_total` and
//!   `clear`; the Redis store has the same operations, async.
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
