//! CONTRACT §10: the `quota-share` selection (`compat/quotaShareStrategy`).
//!
//! `selectQuotaShareTarget` itself is `lib/quotaShareStrategy.js`: it takes the host's
//! target objects and must return those very objects and a closure, which are JavaScript
//! idioms. It extracts what the algorithm needs into a `Float64Array` and makes ONE call
//! to [`quota_share_select`], which runs the whole selection here and writes the order
//! back as indices. The functions named `__quotaShare*` are that crossing, not API.

use super::args::Arg;
use super::errors::or_throw;
use super::scheduler_state::{state, time_from_f64, Sym};
use crate::core::scheduler::select::Target;
use crate::core::scheduler::QUOTA_SHARE_STRATEGY as CORE_STRATEGY;
use napi::bindgen_prelude::{Float64ArraySlice, Unknown};
use napi::{Env, Error, Status};
use napi_derive::napi;

/// The strategy's name in a combo's configuration: `"quota-share"`.
#[napi]
pub const QUOTA_SHARE_STRATEGY: &str = CORE_STRATEGY;

/// Per target, the `Float64Array` of [`quota_share_select`] holds these four numbers.
const STRIDE: usize = 4;

/// Internal (the crossing of `lib/quotaShareStrategy.js`): the symbol of a name — a
/// connection id, an execution key or a combo name — interned on first sight. Symbols are
/// process-wide and stable; the JavaScript side caches them in a `Map`.
#[napi(catch_unwind, js_name = "__quotaShareSymbol", skip_typescript)]
pub fn quota_share_symbol(name: String) -> Sym {
  state().symbols.intern(&name)
}

/// Internal (the crossing of `lib/quotaShareStrategy.js`): runs one selection.
///
/// `buffer` holds, for each of the `count` targets in input order, four numbers: the
/// execution key's symbol, the connection's symbol (or -1 for none), the weight (`NaN`
/// when not a number) and the connection's concurrency cap (`NaN` for none). The order —
/// winner, the rest with room in DRR rank order, at-cap tier, saturated tier — is written
/// as indices into `buffer[4·count .. 5·count]`. The winner's connection (symbol at
/// `buffer[4·order[0] + 1]`) holds an in-flight lease until `__quotaShareRelease`.
#[napi(catch_unwind, js_name = "__quotaShareSelect", skip_typescript)]
pub fn quota_share_select(
  combo: u32,
  model_str: Option<String>,
  now_ms: f64,
  count: u32,
  mut buffer: Float64ArraySlice,
) -> napi::Result<()> {
  // SAFETY: the typed array's memory is not aliased during this synchronous call: the
  // JavaScript caller waits, and nothing here calls back into JavaScript.
  let buffer = unsafe { buffer.as_mut() };
  let count = count as usize;
  if buffer.len() < count * (STRIDE + 1) {
    return Err(Error::new(
      Status::InvalidArg,
      format!("__quotaShareSelect: buffer too small for {count} targets"),
    ));
  }
  let now_ms =
    time_from_f64(now_ms, "nowMs").map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
  let mut guard = state();
  let state = &mut *guard;
  state.targets.clear();
  state.targets.extend(
    buffer[..count * STRIDE]
      .chunks_exact(STRIDE)
      .map(|t| Target {
        execution_key: t[0] as Sym,
        connection: (t[1] >= 0.0).then_some(t[1] as Sym),
        weight: t[2],
        max_concurrent: t[3],
      }),
  );
  state.scheduler.select(
    &state.targets,
    &combo,
    model_str.as_deref(),
    now_ms,
    &mut state.order,
  );
  let out = &mut buffer[count * STRIDE..count * (STRIDE + 1)];
  for (slot, &index) in out.iter_mut().zip(&state.order) {
    *slot = index as f64;
  }
  Ok(())
}

/// Internal (the crossing of `lib/quotaShareStrategy.js`): releases the in-flight lease a
/// selection at `nowMs` took on the connection with symbol `connection`.
#[napi(catch_unwind, js_name = "__quotaShareRelease", skip_typescript)]
pub fn quota_share_release(connection: u32, now_ms: f64) {
  if let Ok(now_ms) = time_from_f64(now_ms, "nowMs") {
    state().scheduler.inflight.decrement(&connection, now_ms);
  }
}

/// Tests only: forgets the DRR state of every combo.
#[napi(catch_unwind, js_name = "_clearDrrStateForTest")]
pub fn clear_drr_state_for_test() {
  state().scheduler.drr.clear();
}

/// Tests only: the DRR deficit of `executionKey` in `comboName` (0 when there is none).
///
/// Throws a `TypeError` (`code: "ERR_QUOTA_INVALID_ARG"`) when an argument is not a string.
#[napi(
  catch_unwind,
  js_name = "_getDrrDeficitForTest",
  ts_args_type = "comboName: string, executionKey: string"
)]
pub fn get_drr_deficit_for_test(
  env: Env,
  combo_name: Unknown,
  execution_key: Unknown,
) -> napi::Result<f64> {
  let result = (|| {
    let combo = Arg::new(combo_name, "comboName")?.string()?;
    let key = Arg::new(execution_key, "executionKey")?.string()?;
    let state = state();
    Ok(match (state.symbols.get(&combo), state.symbols.get(&key)) {
      (Some(combo), Some(key)) => state.scheduler.drr.deficit(&combo, &key),
      _ => 0.0,
    })
  })();
  or_throw(&env, result)
}
