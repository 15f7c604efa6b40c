//! Read-only diagnostics for the `quota-engine` CLI (`doctor`, `plans`): the inspection
//! itself is `store/sqlite/inspect.rs`.

use super::engine;
use super::errors::or_throw;
use napi::Env;
use napi_derive::napi;
use std::path::Path;

/// Reads the database at `path` without writing to it or creating it: `{ path, sqliteVersion,
/// journalMode, userVersion, tables, migrations, quotaStoreSetting?, planRows,
/// hostConnections?, counterRows?, poisonedCounters?, viaEngineConnection }`. Throws
/// `ERR_QUOTA_STORE` when it is missing or not a database. For the `quota-engine` CLI.
#[napi(catch_unwind, ts_return_type = "Record<string, any>")]
pub fn inspect_database(env: Env, path: String) -> napi::Result<serde_json::Value> {
  let inspection = or_throw(&env, engine().database.inspect(Path::new(&path)))?;
  Ok(serde_json::to_value(inspection).unwrap_or_default())
}

/// `quota-engine doctor --repair`: counters of the engine's database outside `0..=1e15` are
/// saturated into it and the pool totals recomputed; the poisoned rows found before.
#[napi(catch_unwind, ts_return_type = "{ rows: number; totals: number }")]
pub fn repair_counters(env: Env) -> napi::Result<serde_json::Value> {
  let found = or_throw(&env, super::with_db(&env, |db| db.repair_counters()))?;
  Ok(serde_json::to_value(found).unwrap_or_default())
}
