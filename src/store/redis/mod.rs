//! The Redis driver (docs/contract.md §4, Redis): counters on Redis, shared by every replica;
//! metadata stays in SQLite.
//!
//! - `keys.rs`: key names and TTLs (the host's names, or hash-tagged per pool in a
//!   cluster); `target.rs`: URL forms (server, cluster, Sentinel, `rediss`) and password
//!   masking; `tls.rs`: a TLS connection's roots and client identity.
//! - `scripts.rs`: the Lua scripts (`lua/`), one EVALSHA per counter operation;
//!   `counters.rs`: `consume`, `clear`, reserve and settle, the pool usage snapshot, the
//!   batched reads and writes (a read's batch is [`RedisBackend::batch`]).
//! - `connection.rs`: one multiplexed, auto-reconnecting connection per URL, a bounded
//!   time per operation; `client.rs`: the ioredis-like client's raw commands.
//! - `write_buffer.rs`: the write-behind buffer (per counter, flushed in one script call);
//!   `view.rs`: the counter view, kept fresh by a RESP3 tracking connection.
//!
//! The operations are async (they run on the addon's tokio runtime); the SQLite store's
//! are sync (`SqliteDb`'s). Each keeps its natural shape: the engine's
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
