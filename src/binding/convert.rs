//! Core values ⇄ the plain JavaScript objects of the host's API. A result struct is
//! `#[from_core]` (the `macros/` crate): each field is the core value's field of the same
//! name through `to_js::ToJs` (the core's enums by name).

use napi::bindgen_prelude::{Either, Null};
use quota_engine_macros::from_core;

/// `{ apiKeyId, weight, capValue?, capUnit?, policy }`.
#[from_core(crate::core::dimensions::PoolAllocation, js_name = "PoolAllocation")]
pub struct PoolAllocationJs {
  pub api_key_id: String,
  /// 0..100.
  pub weight: f64,
  pub cap_value: Option<f64>,
  #[napi(ts_type = "QuotaUnit")]
  pub cap_unit: Option<String>,
  #[napi(ts_type = "Policy")]
  pub policy: String,
}

/// `{ id, connectionId, connectionIds, name, groupId, createdAt, allocations }`.
#[from_core(crate::core::dimensions::QuotaPool, js_name = "QuotaPool")]
pub struct QuotaPoolJs {
  pub id: String,
  /// The primary connection.
  pub connection_id: String,
  /// Every member connection, primary first.
  pub connection_ids: Vec<String>,
  pub name: String,
  pub group_id: String,
  /// ISO-8601.
  pub created_at: String,
  pub allocations: Vec<PoolAllocationJs>,
}

/// `{ connectionId, provider, dimensions, source }`.
#[from_core(crate::core::dimensions::ProviderPlan, js_name = "ProviderPlan")]
pub struct ProviderPlanJs {
  pub connection_id: Either<String, Null>,
  pub provider: String,
  #[napi(ts_type = "Array<QuotaDimension>")]
  pub dimensions: Vec<super::plans::QuotaDimensionJs>,
  #[napi(ts_type = "'auto' | 'manual'")]
  pub source: String,
}

/// `{ poolId, apiKeyId, model, capValue, capUnit }`.
#[from_core(crate::store::ModelCap, js_name = "ModelCap")]
pub struct ModelCapJs {
  pub pool_id: String,
  pub api_key_id: String,
  pub model: String,
  pub cap_value: f64,
  #[napi(ts_type = "QuotaUnit")]
  pub cap_unit: String,
}

/// One `quota_consumption` row.
#[from_core(crate::store::ConsumptionRow, js_name = "ConsumptionRow")]
pub struct ConsumptionRowJs {
  pub api_key_id: String,
  pub dimension_key: String,
  pub unit: String,
  pub window: String,
  pub bucket_index: f64,
  pub consumed: f64,
  pub updated_at: f64,
}
