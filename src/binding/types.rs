//! Shapes that exist only to describe arguments in `index.d.ts`. Arguments are read
//! through `args.rs` instead of these derived conversions, so that bad input is rejected
//! with an error naming the field and carrying a stable code.
#![allow(dead_code)]

use napi_derive::napi;

/// `{ poolId, unit, window }`; its string form is `"<poolId>:<unit>:<window>"`.
#[napi(object)]
pub struct DimensionKey {
  pub pool_id: String,
  #[napi(ts_type = "QuotaUnit")]
  pub unit: String,
  #[napi(ts_type = "QuotaWindow")]
  pub window: String,
}

/// One dimension of a fair-share decision.
#[napi(object, object_to_js = false)]
pub struct FairShareDimension {
  pub key: DimensionKey,
  /// The pool-wide ceiling.
  pub limit: f64,
  /// What the whole pool consumed in the window.
  pub consumed_total: f64,
  /// The upstream's own saturation, 0..1.
  pub global_used_percent: f64,
  /// Beyond the host: the buckets behind the values, which enable `retryAfterMs`.
  pub buckets: Option<WindowBuckets>,
}

/// This key's and the pool's two sliding-window buckets at `nowMs`.
#[napi(object, object_to_js = false)]
pub struct WindowBuckets {
  pub now_ms: f64,
  pub key_prev: f64,
  pub key_curr: f64,
  pub pool_prev: f64,
  pub pool_curr: f64,
}

/// The key's allocation as the decision sees it.
#[napi(object, object_to_js = false)]
pub struct FairShareAllocation {
  /// 0..100.
  pub weight: f64,
  pub cap_value: Option<f64>,
  #[napi(ts_type = "QuotaUnit")]
  pub cap_unit: Option<String>,
  /// `hard`, `soft` or `burst`; anything else is treated as `hard`.
  #[napi(ts_type = "Policy | string")]
  pub policy: String,
  pub api_key_id: Option<String>,
}

/// The input of `decideFairShare`.
#[napi(object, object_to_js = false)]
pub struct FairShareInput {
  pub dimensions: Vec<FairShareDimension>,
  pub allocation: FairShareAllocation,
  /// This key's consumption per dimension key string (`"<poolId>:<unit>:<window>"`).
  pub consumed_by_this_key: std::collections::HashMap<String, f64>,
  /// At or above this `globalUsedPercent` a dimension is in strict mode.
  pub saturation_threshold: f64,
}
