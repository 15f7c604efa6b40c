//! Checks of every metadata and counter write, done in full before a transaction starts so
//! that invalid input writes nothing. Errors name the value's path from the argument
//! JavaScript passed, as the argument readers do (`input.allocations[1].weight`,
//! `plan.dimensions[0].limit`, `cap.capValue`).

use crate::core::dimensions::{DimensionKey, PoolAllocation, QuotaDimension};
use crate::error::{JsNumber, QuotaError, Result};
use std::collections::HashSet;

/// The API key and dimension key a counter call names.
pub fn key(api_key_id: &str, key: &DimensionKey) -> Result<()> {
  non_empty(api_key_id, "apiKeyId")?;
  non_empty(&key.pool_id, "dim.poolId")
}

/// A key's batch of counter writes: a bad one means nothing is written.
pub fn writes(api_key_id: &str, writes: &[(DimensionKey, f64)]) -> Result<()> {
  non_empty(api_key_id, "apiKeyId")?;
  for (index, (key, amount)) in writes.iter().enumerate() {
    non_empty(&key.pool_id, &format!("writes[{index}].poolId"))?;
    cost(*amount, &format!("writes[{index}].cost"))?;
  }
  Ok(())
}

/// `value` must not be empty: a `RangeError` naming `field`.
pub fn non_empty(value: &str, field: &str) -> Result<()> {
  if value.is_empty() {
    Err(QuotaError::range_error(field, "must be a non-empty string"))
  } else {
    Ok(())
  }
}

/// The largest value a stored counter holds (docs/reliability.md, "Finite counters"): far
/// above any real quota (10^15 tokens, requests or USD), far below where `f64` sums lose
/// integer precision past recognition or overflow. Every write saturates here — in Rust,
/// in the SQL upserts (`min(…, 1e15)`, the literal must match) and in the Redis scripts —
/// so no counter, and no sum of counters, is ever infinite or NaN.
pub const COUNTER_MAX: f64 = 1e15;

/// `value` saturated into `0..=COUNTER_MAX` (NaN → 0): what a buffered amount holds.
pub fn saturate(value: f64) -> f64 {
  if value.is_nan() {
    0.0
  } else {
    value.clamp(0.0, COUNTER_MAX)
  }
}

/// `Ok` when `ok`, else a `RangeError` naming `field`: `must be {must}, got {value}`.
fn must_be(ok: bool, value: f64, field: &str, must: &str) -> Result<()> {
  if ok {
    Ok(())
  } else {
    Err(QuotaError::range_error(
      field,
      format!("must be {must}, got {}", JsNumber(value)),
    ))
  }
}

/// A counter increment: finite and not negative.
pub fn cost(value: f64, field: &str) -> Result<()> {
  must_be(
    value.is_finite() && value >= 0.0,
    value,
    field,
    "a finite number >= 0",
  )
}

/// A signed bucket delta (settling or releasing a reservation): any finite number.
pub fn finite(value: f64, field: &str) -> Result<()> {
  must_be(value.is_finite(), value, field, "a finite number")
}

/// A cap or a limit: finite and greater than 0.
pub fn positive(value: f64, field: &str) -> Result<()> {
  let ok = value.is_finite() && value > 0.0;
  must_be(ok, value, field, "a finite number greater than 0")
}

/// Every allocation of a pool: a non-empty, unique `apiKeyId`, a finite weight in 0..=100,
/// a `capValue` > 0 when set. `path` is the list's own path, e.g. `allocations`.
pub fn allocations(list: &[PoolAllocation], path: &str) -> Result<()> {
  let mut seen = HashSet::with_capacity(list.len());
  for (i, allocation) in list.iter().enumerate() {
    let at = |field: &str| format!("{path}[{i}].{field}");
    non_empty(&allocation.api_key_id, &at("apiKeyId"))?;
    if !seen.insert(allocation.api_key_id.as_str()) {
      return Err(QuotaError::range_error(
        at("apiKeyId"),
        format!(
          "duplicate apiKeyId {:?}: a key has one allocation per pool",
          allocation.api_key_id
        ),
      ));
    }
    let weight = allocation.weight;
    let ok = weight.is_finite() && (0.0..=100.0).contains(&weight);
    must_be(ok, weight, &at("weight"), "a finite number from 0 to 100")?;
    if let Some(cap) = allocation.cap_value {
      positive(cap, &at("capValue"))?;
    }
  }
  Ok(())
}

/// Connection ids of a membership list: each non-empty. `path` e.g. `connectionIds`.
pub fn connection_ids(list: &[String], path: &str) -> Result<()> {
  for (i, id) in list.iter().enumerate() {
    non_empty(id, &format!("{path}[{i}]"))?;
  }
  Ok(())
}

/// Plan dimensions: each limit finite and > 0. `path` e.g. `dimensions`.
pub fn dimensions(list: &[QuotaDimension], path: &str) -> Result<()> {
  for (i, dimension) in list.iter().enumerate() {
    positive(dimension.limit, &format!("{path}[{i}].limit"))?;
  }
  Ok(())
}
