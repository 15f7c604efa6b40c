//! The only place with `#[napi]`: it holds the process's one [`Engine`] and converts
//! JavaScript values to the engine's types (rejecting bad input with an error naming the
//! field) and its answers back to plain JS values. One native function per operation;
//! which driver serves it is the engine's business, not the edge's.

mod account_buckets;
pub(crate) mod args;
mod burn_rate;
mod convert;
mod dimensions;
pub(crate) mod errors;
mod fair_share;
pub(crate) mod host;
mod hot_path;
mod inflight;
mod inspect;
mod metadata;
mod plans;
pub(crate) mod promise;
mod quota_share;
mod store;

use crate::engine::Engine;
use crate::error::Result;
use crate::store::sqlite::SqliteDb;
use napi::Env;
use std::sync::LazyLock;

/// The process's engine: every JS thread (main and workers) loads this one copy of the
/// addon, so they all reach the same instance.
static ENGINE: LazyLock<Engine> = LazyLock::new(|| {
  let engine = Engine::default();
  let _ = engine.spawner.set(Box::new(|future| {
    promise::ensure_runtime();
    napi::bindgen_prelude::spawn(future);
  }));
  engine
});

/// The engine.
pub(crate) fn engine() -> &'static Engine {
  &ENGINE
}

/// `f` on the engine's database (buffered records committed first), this thread's path
/// resolver consulted when the database is about to be opened.
pub(crate) fn with_db<T>(env: &Env, f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Result<T> {
  host::prepare_db(env);
  engine().with_db(f)
}
