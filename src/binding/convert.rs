//! Core values ⇄ the plain JavaScript objects of the host's API.

use crate::core::dimensions::{PoolAllocation, ProviderPlan, QuotaPool};
use crate::store::{ConsumptionRow, ModelCap};
use napi_derive::napi;

/// `{ apiKeyId, weight, capValue?, capUnit?, policy }`.
#[napi(object, js_name = "PoolAllocation")]
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

impl From<&PoolAllocation> for PoolAllocationJs {
  fn from(a: &PoolAllocation) -> Self {
    PoolAllocationJs {
      api_key_id: a.api_key_id.clone(),
      weight: a.weight,
      cap_value: a.cap_value,
      cap_unit: a.cap_unit.map(|u| u.as_str().to_string()),
      policy: a.policy.as_str().to_string(),
    }
  }
}

/// `{ id, connectionId, connectionIds, name, groupId, createdAt, allocations }`.
#[napi(object, object_from_js = false, js_name = "QuotaPool")]
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

impl From<&QuotaPool> for QuotaPoolJs {
  fn from(p: &QuotaPool) -> Self {
    QuotaPoolJs {
      id: p.id.clone(),
      connection_id: p.connection_id.clone(),
      connection_ids: p.connection_ids.clone(),
      name: p.name.clone(),
      group_id: p.group_id.clone(),
      created_at: p.created_at.clone(),
      allocations: p.allocations.iter().map(PoolAllocationJs::from).collect(),
    }
  }
}

/// `{ connectionId, provider, dimensions, source }`.
#[napi(object, object_from_js = false, js_name = "ProviderPlan")]
pub struct ProviderPlanJs {
  pub connection_id: napi::bindgen_prelude::Either<String, napi::bindgen_prelude::Null>,
  pub provider: String,
  #[napi(ts_type = "Array<QuotaDimension>")]
  pub dimensions: Vec<super::plans::QuotaDimensionJs>,
  #[napi(ts_type = "'auto' | 'manual'")]
  pub source: String,
}

impl From<&ProviderPlan> for ProviderPlanJs {
  fn from(p: &ProviderPlan) -> Self {
    use napi::bindgen_prelude::{Either, Null};
    ProviderPlanJs {
      connection_id: match &p.connection_id {
        Some(id) => Either::A(id.clone()),
        None => Either::B(Null),
      },
      provider: p.provider.clone(),
      dimensions: p.dimensions.iter().map(Into::into).collect(),
      source: p.source.as_str().to_string(),
    }
  }
}

/// `{ poolId, apiKeyId, model, capValue, capUnit }`.
#[napi(object, object_from_js = false, js_name = "ModelCap")]
pub struct ModelCapJs {
  pub pool_id: String,
  pub api_key_id: String,
  pub model: String,
  pub cap_value: f64,
  #[napi(ts_type = "QuotaUnit")]
  pub cap_unit: String,
}

impl From<&ModelCap> for ModelCapJs {
  fn from(c: &ModelCap) -> Self {
    ModelCapJs {
      pool_id: c.pool_id.clone(),
      api_key_id: c.api_key_id.clone(),
      model: c.model.clone(),
      cap_value: c.cap_value,
      cap_unit: c.cap_unit.as_str().to_string(),
    }
  }
}

/// One `quota_consumption` row.
#[napi(object, object_from_js = false, js_name = "ConsumptionRow")]
pub struct ConsumptionRowJs {
  pub api_key_id: String,
  pub dimension_key: String,
  pub unit: String,
  pub window: String,
  pub bucket_index: f64,
  pub consumed: f64,
  pub updated_at: f64,
}

impl From<&ConsumptionRow> for ConsumptionRowJs {
  fn from(r: &ConsumptionRow) -> Self {
    ConsumptionRowJs {
      api_key_id: r.api_key_id.clone(),
      dimension_key: r.dimension_key.clone(),
      unit: r.unit.clone(),
      window: r.window.clone(),
      bucket_index: r.bucket_index as f64,
      consumed: r.consumed,
      updated_at: r.updated_at as f64,
    }
  }
}
