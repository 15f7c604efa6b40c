//! docs/contract.md §6: the plan catalog (`getKnownPlan`, `knownProviders`).

use crate::core::dimensions::QuotaDimension;
use crate::core::plans::{known_plan, known_providers};
use napi_derive::napi;
use quota_engine_macros::{edge, from_core};

/// `{ unit, window, limit }`: `limit` is the pool-wide ceiling.
#[from_core(QuotaDimension, js_name = "QuotaDimension")]
pub struct QuotaDimensionJs {
  #[napi(ts_type = "QuotaUnit")]
  pub unit: String,
  #[napi(ts_type = "QuotaWindow")]
  pub window: String,
  pub limit: f64,
}

/// A plan of the catalog.
#[from_core(crate::core::plans::KnownPlan)]
pub struct KnownPlan {
  pub provider: String,
  pub dimensions: Vec<QuotaDimensionJs>,
}

/// The catalog's plan for `provider`, or `null`. A limit of `Number.EPSILON` means
/// "unknown: configure the plan manually".
///
/// Throws a `TypeError` (`code: "ERR_QUOTA_INVALID_ARG"`) when `provider` is not a string.
#[edge]
pub fn get_known_plan(provider: string) -> Option<KnownPlan> {
  Ok(known_plan(&provider).map(|plan| KnownPlan::from(&plan)))
}

/// Every provider of the plan catalog, in catalog order.
#[napi(catch_unwind, js_name = "knownProviders")]
pub fn known_providers_js() -> Vec<&'static str> {
  known_providers()
}
