//! The sliding-window counters on Redis (docs/contract.md §2, §4): each operation is one round
//! trip. Input is validated synchronously (a bad argument never reaches the server);
//! what is returned is the future that does the I/O.

use super::connection::{RedisBackend, Retry};
use super::scripts::{
  clear_call, parse_pairs, parse_reserve, reserve_call, settle_call, write_call, ReadBatch,
  Reserved,
};
use crate::core::admission::{AdmissionCheck, BucketDelta, Reservation, ReservationToken};
use crate::core::dimensions::{bucket_index, DimensionKey, PoolAllocation, QuotaUnit, QuotaWindow};
use crate::core::enforce::Buckets;
use crate::error::Result;
use crate::store::usage::{dimension_usage, PlanDimension, PoolUsageSnapshot};
use crate::store::validate;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

/// `write.lua` with `writes`, seen by this process's reads from now on
/// (docs/redis.md#the-counter-view); resolves to one `Buckets` per write.
fn write(
  backend: Arc<RedisBackend>,
  api_key_id: &str,
  writes: &[(DimensionKey, f64)],
  now_ms: i64,
) -> impl Future<Output = Result<Vec<Buckets>>> + Send {
  let call = write_call(backend.layout(), api_key_id, writes, now_ms);
  backend.invalidate_written(&call);
  let count = writes.len();
  async move {
    if count == 0 {
      return Ok(Vec::new());
    }
    let reply = backend.run_script(&call, Retry::Write).await?;
    parse_pairs(&reply, count)
  }
}

/// `consume`: adds `cost` to the current bucket; resolves to the new effective value,
/// computed from the values the same script wrote and read.
pub fn consume(
  backend: Arc<RedisBackend>,
  api_key_id: String,
  key: DimensionKey,
  cost: f64,
  now_ms: i64,
) -> Result<impl Future<Output = Result<f64>> + Send> {
  validate::key(&api_key_id, &key)?;
  validate::cost(cost, "cost")?;
  let window_ms = key.window.ms();
  let written = write(backend, &api_key_id, &[(key, cost)], now_ms);
  Ok(async move { Ok(written.await?[0].effective(now_ms, window_ms)) })
}

/// `recordConsumption`'s writes: every `(dimension key, cost)` of one API key in one
/// script, atomically.
pub fn consume_many(
  backend: Arc<RedisBackend>,
  api_key_id: &str,
  writes: &[(DimensionKey, f64)],
  now_ms: i64,
) -> Result<impl Future<Output = Result<()>> + Send> {
  validate::writes(api_key_id, writes)?;
  let written = write(backend, api_key_id, writes, now_ms);
  Ok(async move { written.await.map(drop) })
}

/// Reserve-mode enforce: `batch`'s reads and `checks` evaluated and — when none blocks —
/// `reservation`'s additions written and its state kept, in one script. Resolves to the
/// first blocking check (0-based) or `None` when admitted, and the values read (one
/// `Buckets` per group).
pub async fn reserve(
  backend: &RedisBackend,
  batch: &ReadBatch,
  checks: &[AdmissionCheck],
  reservation: Option<&Reservation>,
  now_ms: i64,
) -> Result<Reserved> {
  let call = reserve_call(batch, checks, reservation, now_ms);
  let reply = backend.run_script(&call, Retry::Write).await?;
  parse_reserve(&reply, batch.len())
}

/// Settling or releasing the reservation `token` names, at most once: its state is read,
/// checked (made for `api_key_id` when given, in the token's pool), and `settle.lua`
/// deletes it and adds `deltas(state)` — only if the state is still there, so two
/// settles racing on two replicas take effect once. Resolves to the buckets of the deltas
/// it skipped (a key holds another type or not a number), or `Err(why)` for a refused
/// reservation (unknown, used, expired, another key or pool): nothing changed.
pub async fn settle_reservation(
  backend: Arc<RedisBackend>,
  token: ReservationToken,
  api_key_id: Option<String>,
  deltas: impl FnOnce(&Reservation) -> Vec<BucketDelta> + Send + 'static,
) -> Result<std::result::Result<Vec<String>, &'static str>> {
  const GONE: &str = "unknown, already settled or released, or expired";
  let layout = backend.layout();
  let key = layout.reservation_key(&token.pool_id, &token.id);
  let state = match backend
    .command(&["GET".to_string(), key.clone()], Retry::Read)
    .await?
  {
    redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
    redis::Value::SimpleString(text) => text,
    _ => return Ok(Err(GONE)),
  };
  let reservation = Reservation::from_state(&token.id, &state)?;
  if api_key_id.is_some_and(|k| k != reservation.api_key_id) {
    return Ok(Err("made for another API key"));
  }
  if reservation.pool_id() != token.pool_id {
    return Ok(Err("made in another pool"));
  }
  let deltas = deltas(&reservation);
  for (index, (_, _, delta)) in deltas.iter().enumerate() {
    validate::finite(*delta, &format!("deltas[{index}]"))?;
  }
  let call = settle_call(layout, &key, &state, &reservation.api_key_id, &deltas);
  let reply = backend.run_script(&call, Retry::Write).await?;
  Ok(match reply.split_first() {
    Some((Some(done), skipped)) if done == "1" => Ok(skipped.iter().flatten().cloned().collect()),
    _ => Err(GONE),
  })
}

/// Reads a batch: one `Buckets` per group, in order.
pub async fn read(backend: &RedisBackend, batch: &ReadBatch) -> Result<Vec<Buckets>> {
  if batch.is_empty() {
    return Ok(Vec::new());
  }
  let reply = backend.run_script(&batch.call(), Retry::Read).await?;
  parse_pairs(&reply, batch.len())
}

/// `clear`: deletes the key's current and previous buckets (`clear.lua`).
pub fn clear(
  backend: Arc<RedisBackend>,
  api_key_id: String,
  key: DimensionKey,
  now_ms: i64,
) -> Result<impl Future<Output = Result<()>> + Send> {
  validate::key(&api_key_id, &key)?;
  let current = bucket_index(now_ms, key.window.ms());
  let call = clear_call(backend.layout(), &api_key_id, &key, current);
  Ok(async move {
    backend.run_script(&call, Retry::Write).await?;
    Ok(())
  })
}

/// `poolUsageWithDimensions` on Redis: the allocations come from SQLite (the caller),
/// every key's buckets of every known plan dimension from one script.
pub fn pool_usage(
  backend: Arc<RedisBackend>,
  pool_id: String,
  allocations: Option<Vec<PoolAllocation>>,
  plan_dims: Vec<PlanDimension>,
  now_ms: i64,
) -> impl Future<Output = Result<PoolUsageSnapshot>> + Send {
  let dims: Vec<(QuotaUnit, QuotaWindow, f64)> = match &allocations {
    None => Vec::new(),
    Some(_) => plan_dims
      .iter()
      .filter_map(|d| {
        Some((
          QuotaUnit::parse(&d.unit)?,
          QuotaWindow::parse(&d.window)?,
          d.limit,
        ))
      })
      .collect(),
  };
  let allocations = allocations.unwrap_or_default();
  let ids = allocations.iter().map(|a| a.api_key_id.clone());
  let mut batch = backend.batch(ids);
  // One group per dimension and allocation, in that order.
  for (unit, window, _) in &dims {
    let key = DimensionKey::new(pool_id.as_str(), *unit, *window);
    for allocation in &allocations {
      batch.key(
        &allocation.api_key_id,
        &key,
        bucket_index(now_ms, window.ms()),
      );
    }
  }
  async move {
    let values = read(&backend, &batch).await?;
    let n = allocations.len();
    let dimensions = dims.iter().enumerate().map(|(d, (unit, window, limit))| {
      let consumed: HashMap<&str, f64> = (allocations.iter().enumerate())
        .map(|(i, a)| {
          (
            a.api_key_id.as_str(),
            values[d * n + i].effective(now_ms, window.ms()),
          )
        })
        .collect();
      dimension_usage(*unit, *window, *limit, &allocations, |k| {
        consumed.get(k).copied().unwrap_or(0.0)
      })
    });
    let dimensions = dimensions.collect();
    Ok(PoolUsageSnapshot {
      pool_id,
      dimensions,
    })
  }
}
