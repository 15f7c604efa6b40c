//! The hot path's view of the SQLite store (`core::enforce::QuotaSource`): cached
//! metadata and two-row counter reads (through `hot.rs`: cached while nothing was
//! committed, buffered records added).

use super::SqliteDb;
use crate::core::dimensions::{DimensionKey, PoolAllocation, ProviderPlan, QuotaPool};
use crate::core::enforce::{Buckets, ModelCapLimit, QuotaMetadata, QuotaSource};
use crate::core::plans::resolve_plan;
use crate::error::Result;
use std::sync::Arc;

impl QuotaMetadata for SqliteDb {
  fn match_pool(
    &self,
    api_key_id: &str,
    connection_id: &str,
  ) -> Result<Option<(Arc<QuotaPool>, PoolAllocation)>> {
    SqliteDb::match_pool(self, api_key_id, connection_id)
  }

  fn model_cap(
    &self,
    pool_id: &str,
    api_key_id: &str,
    model: &str,
  ) -> Result<Option<ModelCapLimit>> {
    Ok(
      self
        .cached_model_cap(pool_id, api_key_id, model)?
        .map(|cap| ModelCapLimit {
          value: cap.cap_value,
          unit: cap.cap_unit,
        }),
    )
  }

  fn plan(&self, connection_id: &str, provider: &str) -> Arc<ProviderPlan> {
    // `resolve_plan`'s first choice, without copying the cached row.
    if let Ok(Some(stored)) = self.cached_provider_plan(connection_id) {
      if !stored.dimensions.is_empty() {
        return stored;
      }
    }
    Arc::new(resolve_plan(self, connection_id, provider))
  }
}

impl QuotaSource for SqliteDb {
  fn key_buckets(&self, api_key_id: &str, key: &DimensionKey, current: i64) -> Result<Buckets> {
    self.key_pair_now(api_key_id, key, current)
  }

  fn pool_buckets(&self, key: &DimensionKey, current: i64) -> Result<Buckets> {
    self.totals_pair_now(key, current)
  }
}
