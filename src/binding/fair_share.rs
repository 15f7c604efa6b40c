//! docs/contract.md §3: `decideFairShare`, two ways in (docs/api.md#the-pure-functions):
//! `lib/fairShare.js` packs well-formed input into this thread's buffer and decides it with
//! one plain N-API call; anything else comes to the checked entry, which names the bad
//! field. Both decide with `core::fair_share`.

use crate::core::dimensions::{Policy, QuotaUnit, QuotaWindow};
use crate::core::fair_share::FairShareDecision;
use crate::core::packed_fair_share::{decide_packed, HEADER, MAX_DIMENSIONS, OUTCOMES, STRIDE};
use crate::engine::input;
use napi::bindgen_prelude::Object;
use napi::Env;
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

// `__fairShareDecide()`: decides the input packed in the buffer, the outcome written back.
packed_callback!(
  fair_share_decide,
  BUFFER,
  "__fairShareDecide",
  decide_packed
);

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

/// `{ buffer, decide }` for `lib/fairShare.js`, once per JS thread: the packing buffer (one
/// element more, the glue's packing count; `null` where external buffers are not allowed).
#[napi(catch_unwind, js_name = "__fairShareCrossing", skip_typescript)]
pub fn fair_share_crossing(env: &Env) -> napi::Result<Object<'_>> {
  let buffer = packed_buffer(env, HEADER + STRIDE * MAX_DIMENSIONS + 1, &BUFFER)?;
  let mut crossing = crossing_object(env, &[(c"decide", c"__fairShareDecide", fair_share_decide)])?;
  crossing.set("buffer", buffer)?;
  Ok(crossing)
}

/// The layout, for `lib/fairShare.js` at load.
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
