//! The hot path of CONTRACT §7 as pure logic: `enforceQuotaShare`'s decision and
//! `recordConsumption`'s writes. Data comes through [`QuotaSource`] (implemented by the
//! stores) and saturation through [`SaturationLookup`]; time is a parameter.

use std::sync::Arc;

use crate::core::dimensions::{
  DimensionKey, PoolAllocation, ProviderPlan, QuotaDimension, QuotaPool, QuotaUnit, QuotaWindow,
};
use crate::core::fair_share::{
  decay_retry_after_ms, decide_fair_share, AllocationInput, DecisionReason, DimensionInput,
  FairShareInput, WindowBreakdown,
};
use crate::core::plans::EPSILON;
use crate::core::sliding_window::{bucket_index, effective};
use crate::error::Result;

/// Who is asking, for which upstream connection.
#[derive(Debug, Clone, Copy)]
pub struct QuotaRequest<'a> {
  pub api_key_id: &'a str,
  pub connection_id: &'a str,
  pub provider: &'a str,
  pub model: Option<&'a str>,
}

/// A model cap row: the key may spend `value` `unit` per hour on one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelCapLimit {
  pub value: f64,
  pub unit: QuotaUnit,
}

/// `(curr, prev)` of one counter.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Buckets {
  pub curr: f64,
  pub prev: f64,
}

impl Buckets {
  pub fn effective(self, now_ms: i64, window_ms: i64) -> f64 {
    effective(self.prev, self.curr, now_ms, window_ms)
  }
}

/// What the hot path reads from storage.
pub trait QuotaSource {
  /// §7 step 1: the first pool of the key's allocations whose members include
  /// `connection_id`, with the key's allocation.
  fn match_pool(
    &self,
    api_key_id: &str,
    connection_id: &str,
  ) -> Result<Option<(Arc<QuotaPool>, PoolAllocation)>>;
  /// The cap row of `(pool, key, model)`.
  fn model_cap(
    &self,
    pool_id: &str,
    api_key_id: &str,
    model: &str,
  ) -> Result<Option<ModelCapLimit>>;
  /// `resolvePlan(connectionId, provider)` (§6).
  fn plan(&self, connection_id: &str, provider: &str) -> ProviderPlan;
  /// This key's buckets of `key` around bucket `current`.
  fn key_buckets(&self, api_key_id: &str, key: &DimensionKey, current: i64) -> Result<Buckets>;
  /// The pool's summed buckets of `key` around bucket `current`.
  fn pool_buckets(&self, key: &DimensionKey, current: i64) -> Result<Buckets>;
}

/// Upstream saturation (§8), from a cache: `None` means "not known yet, fetch it".
pub trait SaturationLookup {
  fn saturation(
    &self,
    connection_id: &str,
    provider: &str,
    unit: QuotaUnit,
    window: QuotaWindow,
  ) -> Option<f64>;
}

/// Why a request was blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockReason {
  ModelCap,
  FairShare,
  CapAbsolute,
  GlobalSaturated,
}

impl BlockReason {
  /// The reason code carried by the `quota.exceeded` event.
  pub fn as_str(self) -> &'static str {
    match self {
      BlockReason::ModelCap => "model-cap",
      BlockReason::FairShare => "fair-share",
      BlockReason::CapAbsolute => "cap-absolute",
      BlockReason::GlobalSaturated => "global-saturated",
    }
  }

  /// The block message of §7, word for word.
  pub fn message(self, provider: &str, model: Option<&str>) -> String {
    match self {
      BlockReason::ModelCap => format!(
        "Model cap reached for your API key on {provider}/{} [model-cap]",
        model.unwrap_or_default()
      ),
      BlockReason::FairShare => format!("Quota share limit reached for your API key on {provider}"),
      BlockReason::CapAbsolute => {
        format!("Absolute quota cap reached for your API key on {provider}")
      }
      BlockReason::GlobalSaturated => {
        format!("Provider {provider} quota window is saturated; no shared capacity available")
      }
    }
  }
}

/// The outcome of the enforce step.
#[derive(Debug, Clone, PartialEq)]
pub enum EnforceOutcome {
  /// `{ kind: "allow" }`, with `deprioritize` only when the fair-share rule ran.
  Allow { deprioritize: Option<bool> },
  /// `{ kind: "block", reason: message, httpStatus: 429, retryAfterSeconds? }`.
  Block {
    reason: BlockReason,
    message: String,
    retry_after_seconds: Option<f64>,
  },
  /// Saturation of these dimensions is not cached: fetch it, then decide again.
  NeedSaturation(Vec<QuotaDimension>),
}

/// The model bucket of §7 step 2: the key's counter under `"<pool.id>:model:<model>"`,
/// hourly, in the cap's unit.
pub fn model_cap_key(pool_id: &str, model: &str, unit: QuotaUnit) -> DimensionKey {
  DimensionKey::new(
    format!("{pool_id}:model:{model}"),
    unit,
    QuotaWindow::Hourly,
  )
}

fn retry_after_seconds(ms: Option<i64>) -> Option<f64> {
  ms.map(|ms| (ms as f64 / 1000.0).ceil().max(1.0))
}

/// The plan dimensions enforce looks at: those with a real limit (§7 step 3).
fn enforced_dimensions(plan: &ProviderPlan) -> impl Iterator<Item = &QuotaDimension> {
  plan.dimensions.iter().filter(|d| d.limit > EPSILON)
}

/// `enforceQuotaShare`'s steps 1–7 (the event of step 8 is the caller's).
pub fn enforce(
  source: &dyn QuotaSource,
  saturation: &dyn SaturationLookup,
  request: &QuotaRequest<'_>,
  saturation_threshold: f64,
  now_ms: i64,
) -> Result<EnforceOutcome> {
  // 1. Pool membership.
  let Some((pool, allocation)) = source.match_pool(request.api_key_id, request.connection_id)?
  else {
    return Ok(EnforceOutcome::Allow { deprioritize: None });
  };

  // 2. The model cap, on its own hourly bucket.
  if let Some(model) = request.model {
    if let Some(cap) = source.model_cap(&pool.id, request.api_key_id, model)? {
      if cap.value > EPSILON {
        let key = model_cap_key(&pool.id, model, cap.unit);
        let window_ms = QuotaWindow::Hourly.ms();
        let buckets =
          source.key_buckets(request.api_key_id, &key, bucket_index(now_ms, window_ms))?;
        if buckets.effective(now_ms, window_ms) >= cap.value {
          let retry =
            decay_retry_after_ms(buckets.prev, buckets.curr, cap.value, now_ms, window_ms);
          return Ok(EnforceOutcome::Block {
            reason: BlockReason::ModelCap,
            message: BlockReason::ModelCap.message(request.provider, Some(model)),
            retry_after_seconds: retry_after_seconds(retry),
          });
        }
      }
    }
  }

  // 3. The plan, without the dimensions whose limit is unknown (ε).
  let plan = source.plan(request.connection_id, request.provider);
  let dimensions: Vec<&QuotaDimension> = enforced_dimensions(&plan).collect();
  if dimensions.is_empty() {
    return Ok(EnforceOutcome::Allow { deprioritize: None });
  }

  // Saturation of every dimension, or the list of those to fetch first.
  let mut used_percent = Vec::with_capacity(dimensions.len());
  let mut missing = Vec::new();
  for dim in &dimensions {
    match saturation.saturation(
      request.connection_id,
      request.provider,
      dim.unit,
      dim.window,
    ) {
      Some(value) => used_percent.push(value),
      None => missing.push(**dim),
    }
  }
  if !missing.is_empty() {
    return Ok(EnforceOutcome::NeedSaturation(missing));
  }

  // 4. The limit scales with the number of member connections.
  let multiplier = pool.connection_ids.len().max(1) as f64;

  // 5. Each dimension's values.
  let mut inputs = Vec::with_capacity(dimensions.len());
  let mut consumed = Vec::with_capacity(dimensions.len());
  for (dim, global_used_percent) in dimensions.iter().zip(used_percent) {
    let key = DimensionKey::new(pool.id.as_str(), dim.unit, dim.window);
    let window_ms = dim.window.ms();
    let current = bucket_index(now_ms, window_ms);
    let limit = dim.limit * multiplier;
    let mine = source.key_buckets(request.api_key_id, &key, current)?;
    let (consumed_total, breakdown) = if dim.unit == QuotaUnit::Percent {
      (global_used_percent * limit, None)
    } else {
      let pool_buckets = source.pool_buckets(&key, current)?;
      (
        pool_buckets.effective(now_ms, window_ms),
        Some(WindowBreakdown {
          now_ms,
          key_prev: mine.prev,
          key_curr: mine.curr,
          pool_prev: pool_buckets.prev,
          pool_curr: pool_buckets.curr,
        }),
      )
    };
    consumed.push(mine.effective(now_ms, window_ms));
    inputs.push(DimensionInput {
      key,
      limit,
      consumed_total,
      global_used_percent,
      breakdown,
    });
  }

  // 6. A pool whose every weight is 0 splits equally.
  let weight = if pool.allocations.iter().all(|a| a.weight == 0.0) {
    100.0 / pool.allocations.len().max(1) as f64
  } else {
    allocation.weight
  };

  // 7. The decision.
  let decision = decide_fair_share(&FairShareInput {
    dimensions: &inputs,
    allocation: &AllocationInput {
      weight,
      cap_value: allocation.cap_value,
      cap_unit: allocation.cap_unit,
      policy: allocation.policy,
    },
    consumed_by_this_key: &consumed,
    saturation_threshold,
  });
  if decision.is_allow() {
    return Ok(EnforceOutcome::Allow {
      deprioritize: Some(decision.penalized),
    });
  }
  let reason = match decision.reason {
    DecisionReason::FairShare => BlockReason::FairShare,
    DecisionReason::CapAbsolute => BlockReason::CapAbsolute,
    _ => BlockReason::GlobalSaturated,
  };
  Ok(EnforceOutcome::Block {
    reason,
    message: reason.message(request.provider, None),
    retry_after_seconds: retry_after_seconds(decision.retry_after_ms),
  })
}

/// `recordConsumption`'s cost: `{ tokens?, usd?, requests? }`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ConsumptionCost {
  pub tokens: Option<f64>,
  pub usd: Option<f64>,
  pub requests: Option<f64>,
}

impl ConsumptionCost {
  /// What one request costs in `unit`: tokens and usd default to 0, requests to 1,
  /// percent is never counted locally (the upstream reports it).
  pub fn amount(&self, unit: QuotaUnit) -> f64 {
    match unit {
      QuotaUnit::Tokens => self.tokens.unwrap_or(0.0),
      QuotaUnit::Usd => self.usd.unwrap_or(0.0),
      QuotaUnit::Requests => self.requests.unwrap_or(1.0),
      QuotaUnit::Percent => 0.0,
    }
  }
}

/// `recordConsumption`'s writes: every `(dimension key, amount > 0)` to add to the key's
/// counters — each plan dimension, and the model bucket when a cap row exists.
pub fn consumption_writes(
  source: &dyn QuotaSource,
  request: &QuotaRequest<'_>,
  cost: &ConsumptionCost,
) -> Result<Vec<(DimensionKey, f64)>> {
  let Some((pool, _)) = source.match_pool(request.api_key_id, request.connection_id)? else {
    return Ok(Vec::new());
  };
  let plan = source.plan(request.connection_id, request.provider);
  let mut writes: Vec<(DimensionKey, f64)> = plan
    .dimensions
    .iter()
    .map(|dim| {
      (
        DimensionKey::new(pool.id.as_str(), dim.unit, dim.window),
        cost.amount(dim.unit),
      )
    })
    .collect();
  if let Some(model) = request.model {
    if let Some(cap) = source.model_cap(&pool.id, request.api_key_id, model)? {
      writes.push((
        model_cap_key(&pool.id, model, cap.unit),
        cost.amount(cap.unit),
      ));
    }
  }
  // Only positive, finite amounts are written (NaN fails the comparison).
  writes.retain(|(_, amount)| *amount > 0.0 && amount.is_finite());
  Ok(writes)
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::dimensions::{PlanSource, Policy};
  use crate::core::plans::{known_plan, EPSILON};
  use std::cell::RefCell;
  use std::collections::HashMap;

  const H: i64 = 3_600_000;
  const NOW: i64 = 500 * H + H / 2;

  #[derive(Default)]
  struct Fake {
    pools: Vec<Arc<QuotaPool>>,
    plan: Option<ProviderPlan>,
    caps: HashMap<(String, String, String), ModelCapLimit>,
    /// (api key or "*pool*", dimension key string, bucket) → value
    counters: RefCell<HashMap<(String, String, i64), f64>>,
  }

  impl Fake {
    fn add(&self, who: &str, key: &DimensionKey, bucket: i64, value: f64) {
      *self
        .counters
        .borrow_mut()
        .entry((who.to_string(), key.to_string(), bucket))
        .or_default() += value;
      if who != "*pool*" {
        self.add("*pool*", key, bucket, value);
      }
    }
    fn get(&self, who: &str, key: &DimensionKey, bucket: i64) -> f64 {
      let counters = self.counters.borrow();
      counters
        .get(&(who.to_string(), key.to_string(), bucket))
        .copied()
        .unwrap_or(0.0)
    }
  }

  impl QuotaSource for Fake {
    fn match_pool(
      &self,
      api_key_id: &str,
      connection_id: &str,
    ) -> Result<Option<(Arc<QuotaPool>, PoolAllocation)>> {
      Ok(self.pools.iter().find_map(|pool| {
        let allocation = pool
          .allocations
          .iter()
          .find(|a| a.api_key_id == api_key_id)?;
        pool
          .connection_ids
          .iter()
          .any(|c| c == connection_id)
          .then(|| (pool.clone(), allocation.clone()))
      }))
    }
    fn model_cap(
      &self,
      pool_id: &str,
      api_key_id: &str,
      model: &str,
    ) -> Result<Option<ModelCapLimit>> {
      Ok(
        self
          .caps
          .get(&(pool_id.into(), api_key_id.into(), model.into()))
          .copied(),
      )
    }
    fn plan(&self, _connection_id: &str, provider: &str) -> ProviderPlan {
      self.plan.clone().unwrap_or_else(|| ProviderPlan {
        connection_id: None,
        provider: provider.into(),
        dimensions: known_plan(provider)
          .map(|p| p.dimensions)
          .unwrap_or_default(),
        source: PlanSource::Auto,
      })
    }
    fn key_buckets(&self, api_key_id: &str, key: &DimensionKey, current: i64) -> Result<Buckets> {
      Ok(Buckets {
        curr: self.get(api_key_id, key, current),
        prev: self.get(api_key_id, key, current - 1),
      })
    }
    fn pool_buckets(&self, key: &DimensionKey, current: i64) -> Result<Buckets> {
      self.key_buckets("*pool*", key, current)
    }
  }

  struct Saturation(Option<f64>);
  impl SaturationLookup for Saturation {
    fn saturation(&self, _: &str, _: &str, _: QuotaUnit, _: QuotaWindow) -> Option<f64> {
      self.0
    }
  }

  fn alloc(key: &str, weight: f64, policy: Policy) -> PoolAllocation {
    PoolAllocation {
      api_key_id: key.into(),
      weight,
      cap_value: None,
      cap_unit: None,
      policy,
    }
  }

  fn pool(id: &str, connections: &[&str], allocations: Vec<PoolAllocation>) -> Arc<QuotaPool> {
    Arc::new(QuotaPool {
      id: id.into(),
      connection_id: connections[0].into(),
      connection_ids: connections.iter().map(|c| c.to_string()).collect(),
      name: id.into(),
      group_id: "group-demo".into(),
      created_at: "2026-11-30T00:00:00.000Z".into(),
      allocations,
    })
  }

  fn kimi_fake(allocations: Vec<PoolAllocation>) -> Fake {
    Fake {
      pools: vec![pool("p", &["c1"], allocations)],
      ..Fake::default()
    }
  }

  fn request<'a>(key: &'a str, model: Option<&'a str>) -> QuotaRequest<'a> {
    QuotaRequest {
      api_key_id: key,
      connection_id: "c1",
      provider: "kimi",
      model,
    }
  }

  fn requests_key(pool: &str) -> DimensionKey {
    DimensionKey::new(pool, QuotaUnit::Requests, QuotaWindow::Hourly)
  }

  fn run(fake: &Fake, req: &QuotaRequest, saturation: f64) -> EnforceOutcome {
    enforce(fake, &Saturation(Some(saturation)), req, 0.5, NOW).unwrap()
  }

  const ALLOW_PLAIN: EnforceOutcome = EnforceOutcome::Allow { deprioritize: None };
  const ALLOW_RULED: EnforceOutcome = EnforceOutcome::Allow {
    deprioritize: Some(false),
  };

  #[test]
  fn a_key_without_allocations_or_matching_pool_is_allowed() {
    let fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]);
    assert_eq!(run(&fake, &request("nobody", None), 1.0), ALLOW_PLAIN);
    let other = QuotaRequest {
      connection_id: "c9",
      ..request("a", None)
    };
    assert_eq!(run(&fake, &other, 1.0), ALLOW_PLAIN);
  }

  #[test]
  fn pool_membership_includes_every_member_connection() {
    let fake = Fake {
      pools: vec![pool(
        "p",
        &["c1", "c2"],
        vec![alloc("a", 50.0, Policy::Hard)],
      )],
      ..Fake::default()
    };
    let bucket = bucket_index(NOW, H);
    fake.add("a", &requests_key("p"), bucket, 3000.0);
    let on_second = QuotaRequest {
      connection_id: "c2",
      ..request("a", None)
    };
    // The limit doubles with two members (3000): the key is at the pool ceiling.
    match run(&fake, &on_second, 0.0) {
      EnforceOutcome::Block { reason, .. } => assert_eq!(reason, BlockReason::GlobalSaturated),
      other => panic!("expected a block, got {other:?}"),
    }
  }

  #[test]
  fn account_multiplier_scales_the_limit() {
    let fake = Fake {
      pools: vec![pool(
        "p",
        &["c1", "c2"],
        vec![alloc("a", 50.0, Policy::Hard)],
      )],
      ..Fake::default()
    };
    fake.add("a", &requests_key("p"), bucket_index(NOW, H), 2999.0);
    assert_eq!(run(&fake, &request("a", None), 0.0), ALLOW_RULED);
  }

  #[test]
  fn model_cap_blocks_on_its_own_hourly_bucket_with_the_exact_message() {
    let mut fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]);
    fake.caps.insert(
      ("p".into(), "a".into(), "k2".into()),
      ModelCapLimit {
        value: 10.0,
        unit: QuotaUnit::Requests,
      },
    );
    let model_key = model_cap_key("p", "k2", QuotaUnit::Requests);
    assert_eq!(model_key.to_string(), "p:model:k2:requests:hourly");
    fake.add("a", &model_key, bucket_index(NOW, H), 9.0);
    assert_eq!(run(&fake, &request("a", Some("k2")), 0.0), ALLOW_RULED);
    fake.add("a", &model_key, bucket_index(NOW, H), 1.0);
    match run(&fake, &request("a", Some("k2")), 0.0) {
      EnforceOutcome::Block {
        reason, message, ..
      } => {
        assert_eq!(reason, BlockReason::ModelCap);
        assert_eq!(
          message,
          "Model cap reached for your API key on kimi/k2 [model-cap]"
        );
      }
      other => panic!("expected a block, got {other:?}"),
    }
    // Another model is not capped; without a model the cap is not consulted.
    assert_eq!(run(&fake, &request("a", Some("other")), 0.0), ALLOW_RULED);
    assert_eq!(run(&fake, &request("a", None), 0.0), ALLOW_RULED);
  }

  #[test]
  fn a_model_cap_at_epsilon_is_ignored() {
    let mut fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]);
    fake.caps.insert(
      ("p".into(), "a".into(), "k2".into()),
      ModelCapLimit {
        value: EPSILON,
        unit: QuotaUnit::Requests,
      },
    );
    fake.add(
      "a",
      &model_cap_key("p", "k2", QuotaUnit::Requests),
      bucket_index(NOW, H),
      5.0,
    );
    assert_eq!(run(&fake, &request("a", Some("k2")), 0.0), ALLOW_RULED);
  }

  #[test]
  fn no_plan_dimensions_or_only_epsilon_limits_allow() {
    let fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]);
    let openai = QuotaRequest {
      provider: "openai",
      ..request("a", None)
    };
    assert_eq!(run(&fake, &openai, 1.0), ALLOW_PLAIN);
    let glm = QuotaRequest {
      provider: "glm",
      ..request("a", None)
    };
    assert_eq!(run(&fake, &glm, 1.0), ALLOW_PLAIN);
  }

  #[test]
  fn strict_mode_blocks_a_hard_key_over_its_share_with_retry_after() {
    let fake = kimi_fake(vec![
      alloc("a", 50.0, Policy::Hard),
      alloc("b", 50.0, Policy::Hard),
    ]);
    let key = requests_key("p");
    let bucket = bucket_index(NOW, H);
    fake.add("a", &key, bucket - 1, 1000.0);
    fake.add("a", &key, bucket, 300.0);
    // a: 1000 × 0.5 + 300 = 800 ≥ 750 (50 % of 1500)
    match run(&fake, &request("a", None), 0.6) {
      EnforceOutcome::Block {
        reason,
        message,
        retry_after_seconds,
      } => {
        assert_eq!(reason, BlockReason::FairShare);
        assert_eq!(
          message,
          "Quota share limit reached for your API key on kimi"
        );
        // 1000 × (1 − e/H) + 300 < 750 once e/H > 0.55: 0.05 h = 180 s away.
        assert_eq!(retry_after_seconds, Some(181.0));
      }
      other => panic!("expected a block, got {other:?}"),
    }
    // Below the threshold the same key borrows.
    assert_eq!(run(&fake, &request("a", None), 0.4), ALLOW_RULED);
  }

  #[test]
  fn the_pool_ceiling_uses_pool_totals() {
    let fake = kimi_fake(vec![
      alloc("a", 50.0, Policy::Burst),
      alloc("b", 50.0, Policy::Hard),
    ]);
    let key = requests_key("p");
    fake.add("b", &key, bucket_index(NOW, H), 1500.0);
    match run(&fake, &request("a", None), 0.0) {
      EnforceOutcome::Block {
        reason, message, ..
      } => {
        assert_eq!(reason, BlockReason::GlobalSaturated);
        assert_eq!(
          message,
          "Provider kimi quota window is saturated; no shared capacity available"
        );
      }
      other => panic!("expected a block, got {other:?}"),
    }
  }

  #[test]
  fn absolute_cap_message() {
    let mut allocation = alloc("a", 50.0, Policy::Burst);
    allocation.cap_value = Some(5.0);
    allocation.cap_unit = Some(QuotaUnit::Requests);
    let fake = kimi_fake(vec![allocation]);
    fake.add("a", &requests_key("p"), bucket_index(NOW, H), 5.0);
    match run(&fake, &request("a", None), 0.0) {
      EnforceOutcome::Block {
        reason, message, ..
      } => {
        assert_eq!(reason, BlockReason::CapAbsolute);
        assert_eq!(
          message,
          "Absolute quota cap reached for your API key on kimi"
        );
      }
      other => panic!("expected a block, got {other:?}"),
    }
  }

  #[test]
  fn soft_policy_deprioritizes() {
    let fake = kimi_fake(vec![
      alloc("a", 10.0, Policy::Soft),
      alloc("b", 90.0, Policy::Hard),
    ]);
    fake.add("a", &requests_key("p"), bucket_index(NOW, H), 200.0);
    assert_eq!(
      run(&fake, &request("a", None), 0.9),
      EnforceOutcome::Allow {
        deprioritize: Some(true)
      }
    );
  }

  #[test]
  fn all_zero_weights_split_equally() {
    let fake = kimi_fake(vec![
      alloc("a", 0.0, Policy::Hard),
      alloc("b", 0.0, Policy::Hard),
      alloc("c", 0.0, Policy::Hard),
    ]);
    let key = requests_key("p");
    fake.add("a", &key, bucket_index(NOW, H), 499.0);
    assert_eq!(run(&fake, &request("a", None), 0.9), ALLOW_RULED);
    // 100 / 3 % of 1500 is 500 (give or take the last bit of a float).
    fake.add("a", &key, bucket_index(NOW, H), 2.0);
    assert!(matches!(
      run(&fake, &request("a", None), 0.9),
      EnforceOutcome::Block {
        reason: BlockReason::FairShare,
        ..
      }
    ));
  }

  #[test]
  fn percent_dimensions_take_the_pool_total_from_saturation() {
    let fake = Fake {
      pools: vec![pool("p", &["c1"], vec![alloc("a", 50.0, Policy::Hard)])],
      ..Fake::default()
    };
    let codex = QuotaRequest {
      provider: "codex",
      ..request("a", None)
    };
    assert_eq!(run(&fake, &codex, 0.99), ALLOW_RULED);
    assert!(matches!(
      run(&fake, &codex, 1.0),
      EnforceOutcome::Block {
        reason: BlockReason::GlobalSaturated,
        ..
      }
    ));
  }

  #[test]
  fn unknown_saturation_asks_for_a_fetch_first() {
    let fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]);
    let outcome = enforce(&fake, &Saturation(None), &request("a", None), 0.5, NOW).unwrap();
    assert_eq!(
      outcome,
      EnforceOutcome::NeedSaturation(vec![QuotaDimension {
        unit: QuotaUnit::Requests,
        window: QuotaWindow::Hourly,
        limit: 1500.0
      }])
    );
  }

  #[test]
  fn record_writes_each_plan_dimension_and_the_model_bucket() {
    let mut fake = Fake {
      pools: vec![pool("p", &["c1"], vec![alloc("a", 50.0, Policy::Hard)])],
      ..Fake::default()
    };
    fake.caps.insert(
      ("p".into(), "a".into(), "m".into()),
      ModelCapLimit {
        value: 100.0,
        unit: QuotaUnit::Tokens,
      },
    );
    let grok = QuotaRequest {
      provider: "grok-cli",
      model: Some("m"),
      ..request("a", None)
    };
    let cost = ConsumptionCost {
      tokens: Some(120.0),
      usd: Some(0.5),
      requests: None,
    };
    let writes = consumption_writes(&fake, &grok, &cost).unwrap();
    let strings: Vec<(String, f64)> = writes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    assert_eq!(
      strings,
      vec![
        ("p:requests:daily".to_string(), 1.0),
        ("p:tokens:daily".to_string(), 120.0),
        ("p:requests:weekly".to_string(), 1.0),
        ("p:tokens:weekly".to_string(), 120.0),
        ("p:model:m:tokens:hourly".to_string(), 120.0),
      ]
    );
    // Zero amounts and percent dimensions write nothing.
    let codex = QuotaRequest {
      provider: "codex",
      ..request("a", None)
    };
    assert!(consumption_writes(&fake, &codex, &cost).unwrap().is_empty());
    let none = ConsumptionCost {
      tokens: Some(0.0),
      usd: None,
      requests: Some(0.0),
    };
    assert!(consumption_writes(&fake, &grok, &none).unwrap().is_empty());
  }
}
