//! `PoolUsageSnapshot` (docs/contract.md §4) and the pure arithmetic that builds one dimension of
//! it from the pool's allocations and each key's effective consumption.

use crate::core::burn_rate::{compute_burn_rate_from_window, BurnRate};
use crate::core::dimensions::{PoolAllocation, QuotaUnit, QuotaWindow};

/// One plan dimension as the caller passes it: strings as they come from JavaScript, so
/// an unknown unit or window can be skipped rather than rejected.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanDimension<S = String> {
  pub unit: S,
  pub window: S,
  pub limit: f64,
}

/// `{ poolId, dimensions }`; the caller adds `generatedAt` and `burnRate`.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolUsageSnapshot {
  pub pool_id: String,
  pub dimensions: Vec<DimensionUsage>,
}

impl PoolUsageSnapshot {
  /// The snapshot's `burnRate` at `now_ms`: from its first `tokens` dimension, with what is
  /// left of that dimension's limit; `None` without one or when it has no consumption.
  pub fn burn_rate(&self, now_ms: i64) -> Option<BurnRate> {
    let d = self
      .dimensions
      .iter()
      .find(|d| d.unit == QuotaUnit::Tokens)
      .filter(|d| d.consumed_total > 0.0)?;
    Some(compute_burn_rate_from_window(
      d.consumed_total,
      d.window.ms(),
      now_ms,
      Some(d.limit - d.consumed_total),
    ))
  }
}

/// `{ unit, window, limit, consumedTotal, perKey }`.
#[derive(Debug, Clone, PartialEq)]
pub struct DimensionUsage {
  pub unit: QuotaUnit,
  pub window: QuotaWindow,
  pub limit: f64,
  /// The sum of the `per_key` values.
  pub consumed_total: f64,
  pub per_key: Vec<KeyUsage>,
}

/// `{ apiKeyId, consumed, fairShare, deficit, borrowing }`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyUsage {
  pub api_key_id: String,
  pub consumed: f64,
  /// `weight / 100 × limit`, or 0 for every key when the pool's weights sum to 0.
  pub fair_share: f64,
  /// `consumed − fair_share`.
  pub deficit: f64,
  /// `consumed > fair_share`.
  pub borrowing: bool,
}

/// One dimension of the snapshot: a row per allocation, in allocation order, with the
/// key's effective consumption from `consumed_of` (0 when the key has none).
pub fn dimension_usage(
  unit: QuotaUnit,
  window: QuotaWindow,
  limit: f64,
  allocations: &[PoolAllocation],
  consumed_of: impl Fn(&str) -> f64,
) -> DimensionUsage {
  let total_weight: f64 = allocations.iter().map(|a| a.weight).sum();
  let per_key: Vec<KeyUsage> = allocations
    .iter()
    .map(|allocation| {
      let consumed = consumed_of(&allocation.api_key_id);
      let fair_share = if total_weight > 0.0 {
        allocation.weight / 100.0 * limit
      } else {
        0.0
      };
      KeyUsage {
        api_key_id: allocation.api_key_id.clone(),
        consumed,
        fair_share,
        deficit: consumed - fair_share,
        borrowing: consumed > fair_share,
      }
    })
    .collect();
  DimensionUsage {
    unit,
    window,
    limit,
    consumed_total: per_key.iter().map(|k| k.consumed).sum(),
    per_key,
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn burn_rate_comes_from_the_first_tokens_dimension_when_it_has_consumption() {
    let dim = |unit, consumed_total| DimensionUsage {
      unit,
      window: QuotaWindow::Hourly,
      limit: 1000.0,
      consumed_total,
      per_key: Vec::new(),
    };
    let now = 1_800_000; // half way through an hourly bucket
    let snapshot = |dimensions| PoolUsageSnapshot {
      pool_id: "p".into(),
      dimensions,
    };
    assert_eq!(
      snapshot(vec![dim(QuotaUnit::Requests, 50.0)]).burn_rate(now),
      None
    );
    assert_eq!(
      snapshot(vec![
        dim(QuotaUnit::Tokens, 0.0),
        dim(QuotaUnit::Tokens, 9.0)
      ])
      .burn_rate(now),
      None
    );
    let rate = snapshot(vec![
      dim(QuotaUnit::Requests, 5.0),
      dim(QuotaUnit::Tokens, 360.0),
    ])
    .burn_rate(now)
    .unwrap();
    assert_eq!(
      rate,
      compute_burn_rate_from_window(360.0, QuotaWindow::Hourly.ms(), now, Some(640.0))
    );
  }
}
