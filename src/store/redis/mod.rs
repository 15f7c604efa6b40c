//! The Redis driver (docs/contract.md §4, Redis): counters on Redis, shared by every replica;
//! metadata stays in SQLite.
//!
//! - `keys.rs`: key names and TTLs — the host's exact names, or hash-tagged per pool in a
//!   cluster.
//! - `target.rs`: URL forms (one server, a cluster, a Sentinel-managed primary; `rediss`
//!   for TLS) and password masking.
//! - `tls.rs`: the roots and client identity of a TLS connection.
//! - `scripts.rs`: the Lua scripts (`lua/`) and their arguments; every counter operation
//!   is one EVALSHA.
//! - `connection.rs`: one multiplexed, auto-reconnecting connection per URL, a bounded
//!   time per operation.
//! - `client.rs`: the raw commands of the ioredis-like client, replies as JSON.
//! - `write_buffer.rs`: `recordConsumption`'s write-behind buffer (coalesced per counter,
//!   flushed in one script call).
//! - `view.rs`: the hot path's counter view, kept fresh by a RESP3 tracking connection's
//!   invalidations (docs/redis.md#the-counter-view).
//! - `counters.rs`: `consume`, `clear`, reserve and settle, the pool usage snapshot, and
//!   the batched reads and writes (a read's batch is [`RedisBackend::batch`]).
//!
//! The operations are async (they run on the addon's tokio runtime); the SQLite store's
//! are sync ([`super::CounterStore`]). Each keeps its natural shape: the engine's
//! `QuotaDriver` trait (`engine/driver.rs`) answers with a step that is a value now
//! (SQLite, on the JS thread) or a future (Redis), so neither is forced into the other's.

pub mod client;
pub mod connection;
pub mod counters;
pub mod keys;
pub mod scripts;
pub mod target;
pub mod tls;
pub mod view;
pub mod write_buffer;

pub use client::client_command;
pub use connection::{Backends, RedisBackend, RedisOptions, Retry};
pub use keys::{KeyLayout, PoolTotals};
pub use scripts::{ReadBatch, Reserved};
pub use target::{mask_secrets, mask_url};
