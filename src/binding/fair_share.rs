//! docs/contract.md §3: `decideFairShare`.
//!
//! Two ways in. `lib/fairShare.js` reads well-formed input field by field into one
//! `Float64Array` and decides it with one plain N-API call (`__fairShareDecide`): no
//! object crosses, nothing is allocated. Anything it does not recognise as well-formed
//! comes here, to `decideFairShare`, which reads every field with its path and names the
//! offending one in its error. Both decide with the same `core::fair_share`.

use super::errors::on_packed;
use crate::core::dimensions::{Policy, QuotaUnit, QuotaWindow};
use crate::core::fair_share::FairShareDecision;
use crate::core::packed_fair_share::{decide_packed, HEADER, MAX_DIMENSIONS, OUTCOMES, STRIDE};
use crate::engine::input;
use napi::bindgen_prelude::Object;
use napi::{sys, Env};
use napi_derive::napi;
use napi_raw::callback::crossing_object;
use napi_raw::packed::{packed_buffer, PackedBuffer};
use quota_engine_macros::edge;

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
  Ok(FairShareDecisionJs::from(input))
}

// ---- the packed crossing ---------------------------------------------------------------

thread_local! {
  /// This JS thread's packing buffer (the `buffer` of `__fairShareCrossing()`).
  static BUFFER: PackedBuffer = const { PackedBuffer::new() };
}

/// Internal (the crossing of `lib/fairShare.js`): `__fairShareDecide()` decides the packed
/// input in this thread's buffer (laid out as `HEADER`/`STRIDE` say) and writes the outcome
/// back into it.
unsafe extern "C" fn fair_share_decide(
  env: sys::napi_env,
  _info: sys::napi_callback_info,
) -> sys::napi_value {
  unsafe { on_packed(env, &BUFFER, "__fairShareDecide", decide_packed) }
}

/// The vocabulary and layout of the packed crossing, for `lib/fairShare.js`.
#[napi(object, object_from_js = false)]
pub struct FairShareLayout {
  pub header: u32,
  pub stride: u32,
  pub max_dimensions: u32,
  pub units: Vec<&'static str>,
  pub windows: Vec<&'static str>,
  pub policies: Vec<&'static str>,
  /// `[kind, reason, penalized]` per outcome code.
  pub outcomes: Vec<(&'static str, &'static str, bool)>,
}

/// Internal (the crossing of `lib/fairShare.js`, called once per JS thread at load):
/// `{ buffer, decide }` — `buffer` this thread's packing buffer (`HEADER + STRIDE ×
/// MAX_DIMENSIONS` elements and one more, the glue's "packing" mark; `null` where external
/// buffers are not allowed), `decide` the raw callback `__fairShareDecide`.
#[napi(catch_unwind, js_name = "__fairShareCrossing", skip_typescript)]
pub fn fair_share_crossing(env: &Env) -> napi::Result<Object<'_>> {
  let buffer = packed_buffer(env, HEADER + STRIDE * MAX_DIMENSIONS + 1, &BUFFER)?;
  let mut crossing = crossing_object(env, &[(c"decide", c"__fairShareDecide", fair_share_decide)])?;
  crossing.set("buffer", buffer)?;
  Ok(crossing)
}

/// Internal (the crossing of `lib/fairShare.js`, called once at load).
#[napi(catch_unwind, js_name = "__fairShareLayout", skip_typescript)]
pub fn fair_share_layout() -> FairShareLayout {
  FairShareLayout {
    header: HEADER as u32,
    stride: STRIDE as u32,
    max_dimensions: MAX_DIMENSIONS as u32,
    units: QuotaUnit::ALL.iter().map(|u| u.as_str()).collect(),
    windows: QuotaWindow::ALL.iter().map(|w| w.as_str()).collect(),
    policies: Policy::ALL.iter().map(|p| p.as_str()).collect(),
    outcomes: OUTCOMES
      .iter()
      .map(|&(kind, reason, penalized)| (kind.as_str(), reason.as_str(), penalized))
      .collect(),
  }
}
