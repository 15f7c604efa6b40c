//! docs/contract.md §3: `decideFairShare`, one way in (docs/api.md#the-pure-functions):
//! the input object is read field by field by `engine::input::decide`, which names the bad
//! field, and decided by `core::fair_share`.

use crate::core::fair_share::FairShareDecision;
use crate::engine::input;
use quota_engine_macros::{edge, from_core};

/// The result of `decideFairShare`. Absent fields are absent, not `undefined`.
#[from_core(FairShareDecision, js_name = "FairShareDecision")]
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
#[edge(js_name = "decideFairShare", ts_return_type = "FairShareDecision")]
pub fn decide_fair_share_js(#[ts = "FairShareInput"] input: input::decide) -> FairShareDecisionJs {
  Ok(FairShareDecisionJs::from(&input))
}
