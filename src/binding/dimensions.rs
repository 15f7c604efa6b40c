//! docs/contract.md §1: `WINDOW_MS` and `dimensionKeyToString`.

use crate::core::dimensions::QuotaWindow;
use crate::engine::input;
use napi::bindgen_prelude::{JsObjectValue, Object};
use napi::Env;
use quota_engine_macros::edge;

/// The string form of a dimension key, `"<poolId>:<unit>:<window>"`.
///
/// Throws a `TypeError` (`code: "ERR_QUOTA_INVALID_ARG"`) when `key` is not an object or
/// `poolId` is not a string, and a `RangeError` for an unknown unit or window.
#[edge]
pub fn dimension_key_to_string(#[ts = "DimensionKey"] key: input::dimension_key) -> String {
  Ok(key.to_string())
}

/// `WINDOW_MS`: each window's length in milliseconds (monthly is 30 days), frozen.
#[napi_derive::napi(module_exports)]
pub fn define_window_ms(mut exports: Object, env: Env) -> napi::Result<()> {
  let mut windows = Object::new(&env)?;
  for window in QuotaWindow::ALL {
    windows.set(window.as_str(), window.ms() as f64)?;
  }
  windows.freeze()?;
  exports.set("WINDOW_MS", windows)?;
  Ok(())
}
