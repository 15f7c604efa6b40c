//! docs/contract.md §3: `decideFairShare`.

use super::args::Arg;
use super::dimensions::read_dimension_key;
use super::errors::or_throw;
use crate::core::dimensions::{Policy, QuotaUnit};
use crate::core::fair_share::{
  decide_fair_share, AllocationInput, DimensionInput, FairShareDecision, FairShareInput,
  WindowBreakdown,
};
use crate::error::Result;
use napi::bindgen_prelude::Unknown;
use napi::Env;
use napi_derive::napi;

/// The result of `decideFairShare`. Absent fields are absent, not `undefined`.
#[napi(object, object_from_js = false, js_name = "FairShareDecision")]
pub struct FairShareDecisionJs {
  #[napi(ts_type = "'allow' | 'block'")]
  pub kind: String,
  #[napi(ts_type = "'ok' | 'fair-share' | 'cap-absolute' | 'global-saturated'")]
  pub reason: String,
  /// On an allow, when a soft-policy dimension is at or over its fair share.
  #[napi(ts_type = "true")]
  pub penalized: Option<bool>,
  /// On a block, when computable: milliseconds until the decay of the previous bucket
  /// alone would clear the blocking condition.
  pub retry_after_ms: Option<f64>,
}

impl From<FairShareDecision> for FairShareDecisionJs {
  fn from(decision: FairShareDecision) -> Self {
    FairShareDecisionJs {
      kind: decision.kind.as_str().to_string(),
      reason: decision.reason.as_str().to_string(),
      penalized: decision.penalized.then_some(true),
      retry_after_ms: decision.retry_after_ms.map(|ms| ms as f64),
    }
  }
}

fn read_breakdown(arg: &Arg) -> Result<Option<WindowBreakdown>> {
  if arg.is_nullish() {
    return Ok(None);
  }
  Ok(Some(WindowBreakdown {
    now_ms: arg.field("nowMs")?.number()? as i64,
    key_prev: arg.field("keyPrev")?.number()?,
    key_curr: arg.field("keyCurr")?.number()?,
    pool_prev: arg.field("poolPrev")?.number()?,
    pool_curr: arg.field("poolCurr")?.number()?,
  }))
}

fn read_dimension(arg: &Arg) -> Result<DimensionInput> {
  Ok(DimensionInput {
    key: read_dimension_key(&arg.field("key")?)?,
    limit: arg.field("limit")?.number()?,
    consumed_total: arg.field("consumedTotal")?.number()?,
    global_used_percent: arg.field("globalUsedPercent")?.number()?,
    breakdown: read_breakdown(&arg.field("buckets")?)?,
  })
}

fn read_allocation(arg: &Arg) -> Result<AllocationInput> {
  let cap_unit_arg = arg.field("capUnit")?;
  let cap_unit = match cap_unit_arg.opt_string()? {
    Some(unit) => Some(QuotaUnit::parse_field(&unit, &cap_unit_arg.path)?),
    None => None,
  };
  // An unknown (or missing) policy decides like `hard`: fail-safe, never an error.
  let policy = arg
    .field("policy")?
    .opt_string()
    .ok()
    .flatten()
    .map_or(Policy::Hard, |p| Policy::parse_lenient(&p));
  Ok(AllocationInput {
    weight: arg.field("weight")?.number()?,
    cap_value: arg.field("capValue")?.opt_number()?,
    cap_unit,
    policy,
  })
}

fn read_and_decide(input: &Arg) -> Result<FairShareDecision> {
  let dimensions = input
    .field("dimensions")?
    .elements()?
    .iter()
    .map(read_dimension)
    .collect::<Result<Vec<_>>>()?;
  let allocation = read_allocation(&input.field("allocation")?)?;
  let consumed_map = input.field("consumedByThisKey")?;
  let consumed = if consumed_map.is_nullish() {
    Vec::new()
  } else {
    dimensions
      .iter()
      .map(|dim| {
        let value = consumed_map.field(&dim.key.to_string())?;
        Ok(value.opt_number()?.unwrap_or(0.0))
      })
      .collect::<Result<Vec<_>>>()?
  };
  let saturation_threshold = input.field("saturationThreshold")?.number()?;
  Ok(decide_fair_share(&FairShareInput {
    dimensions: &dimensions,
    allocation: &allocation,
    consumed_by_this_key: &consumed,
    saturation_threshold,
  }))
}

/// The work-conserving fair-share decision (docs/contract.md §3), synchronous and pure.
///
/// For each dimension in order (the first block wins): an absolute cap in the dimension's
/// unit blocks at `consumed >= capValue` (`cap-absolute`); a full pool blocks at
/// `consumedTotal >= limit` (`global-saturated`); in strict mode (`globalUsedPercent >=
/// saturationThreshold`) a `hard` key at or over `weight / 100 × limit` is blocked
/// (`fair-share`) and a `soft` one is penalized; otherwise a key may borrow idle share up
/// to the limit. An unknown policy is treated as `hard`.
///
/// Beyond the host: a dimension may carry `buckets` (`{ nowMs, keyPrev, keyCurr,
/// poolPrev, poolCurr }`); then a block carries `retryAfterMs`.
///
/// Throws a `TypeError`/`RangeError` with `code: "ERR_QUOTA_INVALID_ARG"` naming the field
/// for malformed input (a dimension that is not an object, a non-numeric limit, …).
#[napi(
  catch_unwind,
  js_name = "decideFairShare",
  ts_args_type = "input: FairShareInput",
  ts_return_type = "FairShareDecision"
)]
pub fn decide_fair_share_js(env: Env, input: Unknown) -> napi::Result<FairShareDecisionJs> {
  or_throw(
    &env,
    Arg::new(input, "input")
      .and_then(|arg| read_and_decide(&arg))
      .map(FairShareDecisionJs::from),
  )
}
