//! The hot path of docs/contract.md §7 as pure logic: `enforceQuotaShare`'s decision and
//! `recordConsumption`'s writes. Data comes through [`QuotaSource`] (implemented by the
//! stores) and saturation through [`SaturationLookup`]; time is a parameter.

use std::sync::Arc;

use crate::core::dimensions::{
  bucket_index, effective, named_enum, DimensionKey, PoolAllocation, ProviderPlan, QuotaDimension,
  QuotaPool, QuotaUnit, QuotaWindow,
};
use crate::core::fair_share::{
  decay_retry_after_ms, decide_fair_share, AllocationInput, DecisionKind, DecisionReason,
  DimensionInput, FairShareInput, WindowBreakdown,
};
use crate::core::plans::EPSILON;
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

/// The metadata the hot path reads (pools, caps, plans): what to read and how to decide.
pub trait QuotaMetadata {
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
  /// `resolvePlan(connectionId, provider)` (§6); shared, since the hot path asks twice a
  /// request and a stored plan is cached.
  fn plan(&self, connection_id: &str, provider: &str) -> Arc<ProviderPlan>;
}

/// What the hot path reads from storage: the metadata and, synchronously, the counters.
/// A driver whose counters are remote (Redis) implements only [`QuotaMetadata`] and
/// executes an [`EnforcePlan`]'s reads itself, in one round trip.
pub trait QuotaSource: QuotaMetadata {
  /// This key's buckets of `key` around bucket `current`.
  fn key_buckets(&self, api_key_id: &str, key: &DimensionKey, current: i64) -> Result<Buckets>;
  /// The pool's summed buckets of `key` around bucket `current`.
  fn pool_buckets(&self, key: &DimensionKey, current: i64) -> Result<Buckets>;

  /// Every read of `reads`, in order.
  fn read_counters(&self, api_key_id: &str, reads: &[CounterRead]) -> Result<Vec<Buckets>> {
    reads
      .iter()
      .map(|read| match read {
        CounterRead::Key { key, current } => self.key_buckets(api_key_id, key, *current),
        CounterRead::Pool { key, current } => self.pool_buckets(key, *current),
      })
      .collect()
  }
}

/// One counter the decision needs, around bucket `current` of the key's window.
#[derive(Debug, Clone, PartialEq)]
pub enum CounterRead {
  /// The requesting API key's `(curr, prev)`.
  Key { key: DimensionKey, current: i64 },
  /// The pool's summed `(curr, prev)` over every API key with this dimension key.
  Pool { key: DimensionKey, current: i64 },
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

named_enum! {
  /// Why a request was blocked; its name is the reason code of the `quota.exceeded` event.
  pub enum BlockReason {
    ModelCap = "model-cap",
    FairShare = "fair-share",
    CapAbsolute = "cap-absolute",
    GlobalSaturated = "global-saturated",
  }
}

impl BlockReason {
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

/// An allow decided without the fair-share rule (no pool, or nothing limited).
const ALLOW_PLAIN: EnforceOutcome = EnforceOutcome::Allow { deprioritize: None };

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

/// Phase one of `enforceQuotaShare`: either the outcome already (no pool, no limits), or
/// the counters to read and everything needed to decide once they are read.
#[derive(Debug, Clone, PartialEq)]
pub enum EnforceStart {
  /// Decided from metadata alone.
  Done(EnforceOutcome),
  /// Read [`EnforcePlan::reads`], then call [`EnforcePlan::decide`].
  Read(EnforcePlan),
}

/// One enforced plan dimension, before its counters are read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedDimension {
  pub(crate) key: DimensionKey,
  /// The plan limit times the number of member connections (§7 step 4).
  pub(crate) limit: f64,
  /// The upstream's saturation (§8), already looked up.
  pub(crate) global_used_percent: f64,
}

/// What `enforceQuotaShare` must read, and how it decides from the values (§7 steps 2–7).
///
/// Owns its data (`Send + 'static`), so a driver can read the counters asynchronously and
/// decide later, on any thread.
#[derive(Debug, Clone, PartialEq)]
pub struct EnforcePlan {
  pub(crate) pool: Arc<QuotaPool>,
  /// The effective weight (§7 step 6) and the key's cap and policy.
  pub(crate) allocation: AllocationInput,
  /// The model cap (§7 step 2), when one with a real value applies; its counter is
  /// `reads[0]`.
  pub(crate) model_cap: Option<ModelCapLimit>,
  pub(crate) dimensions: Vec<PlannedDimension>,
  /// Dimensions whose saturation is not cached: when the model cap does not block, the
  /// outcome is [`EnforceOutcome::NeedSaturation`] with these.
  pub(crate) missing: Vec<QuotaDimension>,
  pub(crate) reads: Vec<CounterRead>,
  pub(crate) saturation_threshold: f64,
  pub(crate) now_ms: i64,
}

impl EnforcePlan {
  /// The matched pool (its allocations list every API key whose counters make up the
  /// pool's totals).
  pub fn pool(&self) -> &Arc<QuotaPool> {
    &self.pool
  }

  /// The counters to read, in the order [`EnforcePlan::decide`] expects their values.
  pub fn reads(&self) -> &[CounterRead] {
    &self.reads
  }

  /// Steps 2 and 5–7 from the values of [`EnforcePlan::reads`] (`values[i]` is the value
  /// of `reads()[i]`; a missing value counts as empty buckets).
  pub fn decide(&self, request: &QuotaRequest<'_>, values: &[Buckets]) -> EnforceOutcome {
    let now_ms = self.now_ms;
    let value = |i: usize| values.get(i).copied().unwrap_or_default();
    let mut next = 0;

    // 2. The model cap, on its own hourly bucket.
    if let Some(cap) = self.model_cap {
      let buckets = value(next);
      next += 1;
      let window_ms = QuotaWindow::Hourly.ms();
      if buckets.effective(now_ms, window_ms) >= cap.value {
        let retry = decay_retry_after_ms(buckets.prev, buckets.curr, cap.value, now_ms, window_ms);
        return EnforceOutcome::Block {
          reason: BlockReason::ModelCap,
          message: BlockReason::ModelCap.message(request.provider, request.model),
          retry_after_seconds: retry_after_seconds(retry),
        };
      }
    }

    // 3. No limited dimension: allow; saturation still unknown: fetch it first.
    if self.dimensions.is_empty() {
      return ALLOW_PLAIN;
    }
    if !self.missing.is_empty() {
      return EnforceOutcome::NeedSaturation(self.missing.clone());
    }

    // 5. Each dimension's values.
    let mut inputs = Vec::with_capacity(self.dimensions.len());
    let mut consumed = Vec::with_capacity(self.dimensions.len());
    for dim in &self.dimensions {
      let window_ms = dim.key.window.ms();
      let mine = value(next);
      next += 1;
      let (consumed_total, breakdown) = if dim.key.unit == QuotaUnit::Percent {
        (dim.global_used_percent * dim.limit, None)
      } else {
        let pool = value(next);
        next += 1;
        (
          pool.effective(now_ms, window_ms),
          Some(WindowBreakdown {
            now_ms,
            key_prev: mine.prev,
            key_curr: mine.curr,
            pool_prev: pool.prev,
            pool_curr: pool.curr,
          }),
        )
      };
      consumed.push(mine.effective(now_ms, window_ms));
      inputs.push(DimensionInput {
        key: dim.key.clone(),
        limit: dim.limit,
        consumed_total,
        global_used_percent: dim.global_used_percent,
        breakdown,
      });
    }

    // 7. The decision.
    let decision = decide_fair_share(&FairShareInput {
      dimensions: &inputs,
      allocation: &self.allocation,
      consumed_by_this_key: &consumed,
      saturation_threshold: self.saturation_threshold,
    });
    if decision.kind == DecisionKind::Allow {
      return EnforceOutcome::Allow {
        deprioritize: Some(decision.penalized),
      };
    }
    let reason = match decision.reason {
      DecisionReason::FairShare => BlockReason::FairShare,
      DecisionReason::CapAbsolute => BlockReason::CapAbsolute,
      _ => BlockReason::GlobalSaturated,
    };
    EnforceOutcome::Block {
      reason,
      message: reason.message(request.provider, None),
      retry_after_seconds: retry_after_seconds(decision.retry_after_ms),
    }
  }
}

/// Phase one of `enforceQuotaShare` (§7 steps 1, 3, 4, 6 and the saturation lookup):
/// metadata only, no counter is read.
pub fn plan_enforce(
  metadata: &dyn QuotaMetadata,
  saturation: &dyn SaturationLookup,
  request: &QuotaRequest<'_>,
  saturation_threshold: f64,
  now_ms: i64,
) -> Result<EnforceStart> {
  // 1. Pool membership.
  let Some((pool, allocation)) = metadata.match_pool(request.api_key_id, request.connection_id)?
  else {
    return Ok(EnforceStart::Done(ALLOW_PLAIN));
  };

  // 2. The model cap row (its counter is read with the others).
  let mut reads = Vec::new();
  let model_cap = match request.model {
    Some(model) => metadata
      .model_cap(&pool.id, request.api_key_id, model)?
      .filter(|cap| cap.value > EPSILON)
      .inspect(|cap| {
        reads.push(CounterRead::Key {
          key: model_cap_key(&pool.id, model, cap.unit),
          current: bucket_index(now_ms, QuotaWindow::Hourly.ms()),
        })
      }),
    None => None,
  };

  // 3. The plan, without the dimensions whose limit is unknown (ε).
  let plan = metadata.plan(request.connection_id, request.provider);
  let enforced: Vec<&QuotaDimension> = plan
    .dimensions
    .iter()
    .filter(|d| d.limit > EPSILON)
    .collect();
  if enforced.is_empty() && model_cap.is_none() {
    return Ok(EnforceStart::Done(ALLOW_PLAIN));
  }

  // Saturation of every dimension, or the list of those to fetch first.
  let mut missing = Vec::new();
  let mut dimensions = Vec::with_capacity(enforced.len());
  // 4. The limit scales with the number of member connections.
  let multiplier = pool.connection_ids.len().max(1) as f64;
  for dim in &enforced {
    let global_used_percent = saturation
      .saturation(
        request.connection_id,
        request.provider,
        dim.unit,
        dim.window,
      )
      .unwrap_or_else(|| {
        missing.push(**dim);
        0.0
      });
    dimensions.push(PlannedDimension {
      key: DimensionKey::new(pool.id.as_str(), dim.unit, dim.window),
      limit: dim.limit * multiplier,
      global_used_percent,
    });
  }

  // 5. The counters: this key's, and the pool's for countable units. Not read while
  // saturation is missing (the call is repeated once it is fetched).
  if missing.is_empty() {
    for dim in &dimensions {
      let current = bucket_index(now_ms, dim.key.window.ms());
      reads.push(CounterRead::Key {
        key: dim.key.clone(),
        current,
      });
      if dim.key.unit != QuotaUnit::Percent {
        reads.push(CounterRead::Pool {
          key: dim.key.clone(),
          current,
        });
      }
    }
  }

  // 6. A pool whose every weight is 0 splits equally.
  let weight = if pool.allocations.iter().all(|a| a.weight == 0.0) {
    100.0 / pool.allocations.len().max(1) as f64
  } else {
    allocation.weight
  };

  Ok(EnforceStart::Read(EnforcePlan {
    allocation: AllocationInput {
      weight,
      cap_value: allocation.cap_value,
      cap_unit: allocation.cap_unit,
      policy: allocation.policy,
    },
    pool,
    model_cap,
    dimensions,
    missing,
    reads,
    saturation_threshold,
    now_ms,
  }))
}

/// `enforceQuotaShare`'s steps 1–7 (the event of step 8 is the caller's) on a source
/// whose counters are read synchronously: [`plan_enforce`], the reads, then
/// [`EnforcePlan::decide`].
pub fn enforce(
  source: &dyn QuotaSource,
  saturation: &dyn SaturationLookup,
  request: &QuotaRequest<'_>,
  saturation_threshold: f64,
  now_ms: i64,
) -> Result<EnforceOutcome> {
  match plan_enforce(source, saturation, request, saturation_threshold, now_ms)? {
    EnforceStart::Done(outcome) => Ok(outcome),
    EnforceStart::Read(plan) => {
      let values = source.read_counters(request.api_key_id, plan.reads())?;
      Ok(plan.decide(request, &values))
    }
  }
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
  source: &dyn QuotaMetadata,
  request: &QuotaRequest<'_>,
  cost: &ConsumptionCost,
) -> Result<Vec<(DimensionKey, f64)>> {
  let mut writes = planned_writes(source, request, cost)?;
  // Only positive, finite amounts are written (NaN fails the comparison).
  writes.retain(|(_, amount)| *amount > 0.0 && amount.is_finite());
  Ok(writes)
}

/// Every counter `recordConsumption` would write for `request` — each countable plan
/// dimension and the model bucket when a cap row exists — with `cost`'s amount, zero and
/// non-finite amounts included (percent dimensions are left out: never counted locally).
pub fn planned_writes(
  source: &dyn QuotaMetadata,
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
  writes.retain(|(key, _)| key.unit != QuotaUnit::Percent);
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
    /// Key `a`'s cap on `model` in pool `p`.
    fn cap(mut self, model: &str, value: f64, unit: QuotaUnit) -> Self {
      let key = ("p".into(), "a".into(), model.into());
      self.caps.insert(key, ModelCapLimit { value, unit });
      self
    }
    fn get(&self, who: &str, key: &DimensionKey, bucket: i64) -> f64 {
      let counters = self.counters.borrow();
      counters
        .get(&(who.to_string(), key.to_string(), bucket))
        .copied()
        .unwrap_or(0.0)
    }
  }

  impl QuotaMetadata for Fake {
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
    fn plan(&self, _connection_id: &str, provider: &str) -> Arc<ProviderPlan> {
      Arc::new(ProviderPlan {
        connection_id: None,
        provider: provider.into(),
        dimensions: known_plan(provider)
          .map(|p| p.dimensions)
          .unwrap_or_default(),
        source: PlanSource::Auto,
      })
    }
  }

  impl QuotaSource for Fake {
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

  /// Key `a` on `provider`.
  fn on(provider: &str) -> QuotaRequest<'_> {
    QuotaRequest {
      provider,
      ..request("a", None)
    }
  }

  fn requests_key(pool: &str) -> DimensionKey {
    DimensionKey::new(pool, QuotaUnit::Requests, QuotaWindow::Hourly)
  }

  fn run(fake: &Fake, req: &QuotaRequest, saturation: f64) -> EnforceOutcome {
    enforce(fake, &Saturation(Some(saturation)), req, 0.5, NOW).unwrap()
  }

  /// The reason of a block; `None` for anything else.
  fn reason(outcome: EnforceOutcome) -> Option<BlockReason> {
    match outcome {
      EnforceOutcome::Block { reason, .. } => Some(reason),
      _ => None,
    }
  }

  const ALLOW_RULED: EnforceOutcome = EnforceOutcome::Allow {
    deprioritize: Some(false),
  };
  const NOW_BUCKET: i64 = NOW / H;

  #[test]
  fn block_messages_are_the_contracts_word_for_word() {
    let cases = [
      (
        BlockReason::ModelCap,
        "Model cap reached for your API key on kimi/k2 [model-cap]",
      ),
      (
        BlockReason::FairShare,
        "Quota share limit reached for your API key on kimi",
      ),
      (
        BlockReason::CapAbsolute,
        "Absolute quota cap reached for your API key on kimi",
      ),
      (
        BlockReason::GlobalSaturated,
        "Provider kimi quota window is saturated; no shared capacity available",
      ),
    ];
    for (reason, message) in cases {
      assert_eq!(reason.message("kimi", Some("k2")), message);
    }
  }

  #[test]
  fn no_pool_or_no_limited_dimension_allows_without_reads() {
    let fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]);
    let elsewhere = QuotaRequest {
      connection_id: "c9",
      ..request("a", None)
    };
    // No allocation, no pool on this connection, no plan, only ε limits.
    for req in [request("nobody", None), elsewhere, on("openai"), on("glm")] {
      let start = plan_enforce(&fake, &Saturation(None), &req, 0.5, NOW);
      assert_eq!(start.unwrap(), EnforceStart::Done(ALLOW_PLAIN), "{req:?}");
    }
  }

  #[test]
  fn every_member_connection_matches_and_multiplies_the_limit() {
    let fake = Fake {
      pools: vec![pool(
        "p",
        &["c1", "c2"],
        vec![alloc("a", 50.0, Policy::Hard)],
      )],
      ..Fake::default()
    };
    let on_second = QuotaRequest {
      connection_id: "c2",
      ..request("a", None)
    };
    // Two members: the limit is 3000, not 1500.
    fake.add("a", &requests_key("p"), NOW_BUCKET, 2999.0);
    assert_eq!(run(&fake, &on_second, 0.0), ALLOW_RULED);
    fake.add("a", &requests_key("p"), NOW_BUCKET, 1.0);
    assert_eq!(
      reason(run(&fake, &on_second, 0.0)),
      Some(BlockReason::GlobalSaturated)
    );
  }

  #[test]
  fn model_cap_blocks_on_its_own_hourly_bucket() {
    let fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]).cap("k2", 10.0, QuotaUnit::Requests);
    let model_key = model_cap_key("p", "k2", QuotaUnit::Requests);
    assert_eq!(model_key.to_string(), "p:model:k2:requests:hourly");
    fake.add("a", &model_key, NOW_BUCKET, 9.0);
    assert_eq!(run(&fake, &request("a", Some("k2")), 0.0), ALLOW_RULED);
    fake.add("a", &model_key, NOW_BUCKET, 1.0);
    match run(&fake, &request("a", Some("k2")), 0.0) {
      EnforceOutcome::Block {
        reason, message, ..
      } => {
        assert_eq!(reason, BlockReason::ModelCap);
        assert_eq!(message, BlockReason::ModelCap.message("kimi", Some("k2")));
      }
      other => panic!("expected a block, got {other:?}"),
    }
    // Another model is not capped; without a model the cap is not consulted.
    assert_eq!(run(&fake, &request("a", Some("other")), 0.0), ALLOW_RULED);
    assert_eq!(run(&fake, &request("a", None), 0.0), ALLOW_RULED);
  }

  #[test]
  fn a_model_cap_at_epsilon_is_ignored() {
    let fake =
      kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]).cap("k2", EPSILON, QuotaUnit::Requests);
    let model_key = model_cap_key("p", "k2", QuotaUnit::Requests);
    fake.add("a", &model_key, NOW_BUCKET, 5.0);
    assert_eq!(run(&fake, &request("a", Some("k2")), 0.0), ALLOW_RULED);
  }

  #[test]
  fn strict_mode_blocks_a_hard_key_over_its_share_with_retry_after() {
    let fake = kimi_fake(vec![
      alloc("a", 50.0, Policy::Hard),
      alloc("b", 50.0, Policy::Hard),
    ]);
    let key = requests_key("p");
    fake.add("a", &key, NOW_BUCKET - 1, 1000.0);
    fake.add("a", &key, NOW_BUCKET, 300.0);
    // a: 1000 × 0.5 + 300 = 800 ≥ 750 (50 % of 1500)
    match run(&fake, &request("a", None), 0.6) {
      EnforceOutcome::Block {
        reason,
        retry_after_seconds,
        ..
      } => {
        assert_eq!(reason, BlockReason::FairShare);
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
    fake.add("b", &requests_key("p"), NOW_BUCKET, 1500.0);
    assert_eq!(
      reason(run(&fake, &request("a", None), 0.0)),
      Some(BlockReason::GlobalSaturated)
    );
  }

  #[test]
  fn the_absolute_cap_blocks_in_its_unit() {
    let mut allocation = alloc("a", 50.0, Policy::Burst);
    allocation.cap_value = Some(5.0);
    allocation.cap_unit = Some(QuotaUnit::Requests);
    let fake = kimi_fake(vec![allocation]);
    fake.add("a", &requests_key("p"), NOW_BUCKET, 5.0);
    assert_eq!(
      reason(run(&fake, &request("a", None), 0.0)),
      Some(BlockReason::CapAbsolute)
    );
  }

  #[test]
  fn soft_policy_deprioritizes() {
    let fake = kimi_fake(vec![
      alloc("a", 10.0, Policy::Soft),
      alloc("b", 90.0, Policy::Hard),
    ]);
    fake.add("a", &requests_key("p"), NOW_BUCKET, 200.0);
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
    fake.add("a", &key, NOW_BUCKET, 499.0);
    assert_eq!(run(&fake, &request("a", None), 0.9), ALLOW_RULED);
    // 100 / 3 % of 1500 is 500 (give or take the last bit of a float).
    fake.add("a", &key, NOW_BUCKET, 2.0);
    assert_eq!(
      reason(run(&fake, &request("a", None), 0.9)),
      Some(BlockReason::FairShare)
    );
  }

  #[test]
  fn percent_dimensions_take_the_pool_total_from_saturation() {
    let fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]);
    assert_eq!(run(&fake, &on("codex"), 0.99), ALLOW_RULED);
    assert_eq!(
      reason(run(&fake, &on("codex"), 1.0)),
      Some(BlockReason::GlobalSaturated)
    );
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
  fn the_plan_lists_its_reads_in_the_order_decide_takes_them() {
    let fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]).cap("k2", 10.0, QuotaUnit::Requests);
    let req = request("a", Some("k2"));
    let EnforceStart::Read(plan) =
      plan_enforce(&fake, &Saturation(Some(0.0)), &req, 0.5, NOW).unwrap()
    else {
      panic!("expected reads");
    };
    let (key, current) = (requests_key("p"), NOW_BUCKET);
    assert_eq!(
      plan.reads(),
      &[
        CounterRead::Key {
          key: model_cap_key("p", "k2", QuotaUnit::Requests),
          current
        },
        CounterRead::Key {
          key: key.clone(),
          current
        },
        CounterRead::Pool { key, current },
      ]
    );
    assert_eq!(plan.pool().id, "p");
    // The values decide: the model bucket at its cap blocks; the pool at its ceiling too.
    let empty = Buckets::default();
    let full = |v: f64| Buckets { curr: v, prev: 0.0 };
    let decide = |values: &[Buckets]| plan.decide(&req, values);
    assert_eq!(
      reason(decide(&[full(10.0), empty, empty])),
      Some(BlockReason::ModelCap)
    );
    assert_eq!(
      reason(decide(&[empty, full(1.0), full(1500.0)])),
      Some(BlockReason::GlobalSaturated)
    );
    assert_eq!(decide(&[empty, empty, empty]), ALLOW_RULED);
  }

  #[test]
  fn a_model_cap_decides_before_saturation_is_fetched() {
    let fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]).cap("k2", 3.0, QuotaUnit::Requests);
    let req = request("a", Some("k2"));
    let EnforceStart::Read(plan) = plan_enforce(&fake, &Saturation(None), &req, 0.5, NOW).unwrap()
    else {
      panic!("expected reads");
    };
    // Only the model bucket is read while saturation is unknown.
    assert_eq!(plan.reads().len(), 1);
    let at_cap = Buckets {
      curr: 3.0,
      prev: 0.0,
    };
    assert_eq!(
      reason(plan.decide(&req, &[at_cap])),
      Some(BlockReason::ModelCap)
    );
    assert!(matches!(
      plan.decide(&req, &[Buckets::default()]),
      EnforceOutcome::NeedSaturation(_)
    ));
  }

  #[test]
  fn record_writes_each_plan_dimension_and_the_model_bucket() {
    let fake = kimi_fake(vec![alloc("a", 50.0, Policy::Hard)]).cap("m", 100.0, QuotaUnit::Tokens);
    let grok = QuotaRequest {
      model: Some("m"),
      ..on("grok-cli")
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
    assert!(consumption_writes(&fake, &on("codex"), &cost)
      .unwrap()
      .is_empty());
    let none = ConsumptionCost {
      tokens: Some(0.0),
      usd: None,
      requests: Some(0.0),
    };
    assert!(consumption_writes(&fake, &grok, &none).unwrap().is_empty());
  }
}
