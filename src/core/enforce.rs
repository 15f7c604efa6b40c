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

// Each step of §7 (pool membership, the member multiplier, the model cap, ε limits, the
// modes, percent dimensions, zero weights, the four block messages, the writes of
// `recordConsumption`) has its case in __test__/enforce.test.mjs, on a real store; these are
// about the plan/decide split the Redis driver uses, and the edges a store cannot reach.
#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::dimensions::{PlanSource, Policy};
  use crate::core::plans::known_plan;

  const H: i64 = 3_600_000;
  const NOW: i64 = 500 * H + H / 2;
  const NOW_BUCKET: i64 = NOW / H;

  /// Pool `p` on connection `c1` with key `a` (weight 50, hard), and key `a`'s model caps.
  struct Fake(Vec<(&'static str, ModelCapLimit)>);

  impl QuotaMetadata for Fake {
    fn match_pool(
      &self,
      key: &str,
      conn: &str,
    ) -> Result<Option<(Arc<QuotaPool>, PoolAllocation)>> {
      let allocation = PoolAllocation {
        api_key_id: "a".into(),
        weight: 50.0,
        cap_value: None,
        cap_unit: None,
        policy: Policy::Hard,
      };
      let pool = QuotaPool {
        id: "p".into(),
        connection_id: "c1".into(),
        connection_ids: vec!["c1".into()],
        name: "p".into(),
        group_id: "g".into(),
        created_at: String::new(),
        allocations: vec![allocation.clone()],
      };
      Ok((key == "a" && conn == "c1").then(|| (Arc::new(pool), allocation)))
    }
    fn model_cap(&self, _: &str, _: &str, model: &str) -> Result<Option<ModelCapLimit>> {
      let cap = self.0.iter().find(|(m, _)| *m == model);
      Ok(cap.map(|(_, cap)| *cap))
    }
    fn plan(&self, _connection_id: &str, provider: &str) -> Arc<ProviderPlan> {
      Arc::new(ProviderPlan {
        connection_id: None,
        provider: provider.into(),
        dimensions: known_plan(provider).map_or_else(Vec::new, |p| p.dimensions),
        source: PlanSource::Auto,
      })
    }
  }

  struct Saturation(Option<f64>);
  impl SaturationLookup for Saturation {
    fn saturation(&self, _: &str, _: &str, _: QuotaUnit, _: QuotaWindow) -> Option<f64> {
      self.0
    }
  }

  /// Key `a` on `kimi` (1500 requests an hour), asking for `model`.
  fn request(model: Option<&str>) -> QuotaRequest<'_> {
    QuotaRequest {
      api_key_id: "a",
      connection_id: "c1",
      provider: "kimi",
      model,
    }
  }

  fn plan_of(fake: &Fake, req: &QuotaRequest, saturation: Option<f64>) -> EnforcePlan {
    match plan_enforce(fake, &Saturation(saturation), req, 0.5, NOW).unwrap() {
      EnforceStart::Read(plan) => plan,
      done => panic!("expected reads, got {done:?}"),
    }
  }

  /// The reason of a block; `None` for anything else.
  fn reason(outcome: EnforceOutcome) -> Option<BlockReason> {
    match outcome {
      EnforceOutcome::Block { reason, .. } => Some(reason),
      _ => None,
    }
  }

  fn requests(cap: f64) -> ModelCapLimit {
    ModelCapLimit {
      value: cap,
      unit: QuotaUnit::Requests,
    }
  }

  #[test]
  fn the_plan_lists_its_reads_in_the_order_decide_takes_them() {
    let fake = Fake(vec![("k2", requests(10.0)), ("tiny", requests(EPSILON))]);
    let req = request(Some("k2"));
    let plan = plan_of(&fake, &req, Some(0.0));
    let (key, current) = (
      DimensionKey::new("p", QuotaUnit::Requests, QuotaWindow::Hourly),
      NOW_BUCKET,
    );
    let model = CounterRead::Key {
      key: model_cap_key("p", "k2", QuotaUnit::Requests),
      current,
    };
    let dimension = [
      CounterRead::Key {
        key: key.clone(),
        current,
      },
      CounterRead::Pool { key, current },
    ];
    assert_eq!(plan.reads(), [&[model][..], &dimension].concat());
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
    assert_eq!(
      decide(&[empty, empty, empty]),
      EnforceOutcome::Allow {
        deprioritize: Some(false)
      }
    );
    // A cap at ε is no cap: its bucket is not read.
    assert_eq!(
      plan_of(&fake, &request(Some("tiny")), Some(0.0)).reads(),
      dimension
    );
  }

  #[test]
  fn a_model_cap_decides_before_saturation_is_fetched() {
    let fake = Fake(vec![("k2", requests(3.0))]);
    let req = request(Some("k2"));
    let plan = plan_of(&fake, &req, None);
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
  fn record_writes_each_plan_dimension_and_the_model_bucket_in_its_unit() {
    let tokens = ModelCapLimit {
      value: 100.0,
      unit: QuotaUnit::Tokens,
    };
    let fake = Fake(vec![("m", tokens)]);
    let grok = QuotaRequest {
      provider: "grok-cli",
      ..request(Some("m"))
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
    // Zero amounts write nothing; percent dimensions are never counted, not even planned.
    let zero = ConsumptionCost {
      tokens: Some(0.0),
      usd: None,
      requests: Some(0.0),
    };
    assert!(consumption_writes(&fake, &grok, &zero).unwrap().is_empty());
    let codex = QuotaRequest {
      provider: "codex",
      ..request(None)
    };
    assert!(planned_writes(&fake, &codex, &cost).unwrap().is_empty());
  }
}
