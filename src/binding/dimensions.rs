//! docs/contract.md §1: `WINDOW_MS` and `dimensionKeyToString`.

use super::args::Arg;
use super::errors::or_throw;
use crate::core::dimensions::{self as core_dims, DimensionKey};
use crate::error::Result;
use napi::bindgen_prelude::{JsObjectValue, Object, Unknown};
use napi::Env;
use napi_derive::napi;

/// Reads a `DimensionKey` (`{ poolId, unit, window }`) from a JS value.
pub(crate) fn read_dimension_key(arg: &Arg) -> Result<DimensionKey> {
  let pool_id = arg.field("poolId")?.string()?;
  let unit_arg = arg.field("unit")?;
  let unit = core_dims::QuotaUnit::parse_field(&unit_arg.string()?, &unit_arg.path)?;
  let window_arg = arg.field("window")?;
  let window = core_dims::QuotaWindow::parse_field(&window_arg.string()?, &window_arg.path)?;
  Ok(DimensionKey::new(pool_id, unit, window))
}

/// The string form of a dimension key, `"<poolId>:<unit>:<window>"`.
///
/// Throws a `TypeError` (`code: "ERR_QUOTA_INVALID_ARG"`) when `key` is not an object or
/// `poolId` is not a string, and a `RangeError` for an unknown unit or window.
#[napi(catch_unwind, ts_args_type = "key: DimensionKey")]
pub fn dimension_key_to_string(env: Env, key: Unknown) -> napi::Result<String> {
  or_throw(
    &env,
    Arg::new(key, "key")
      .and_then(|arg| read_dimension_key(&arg))
      .map(|key| key.to_string()),
  )
}

/// `WINDOW_MS`: each window's length in milliseconds (monthly is 30 days), frozen.
#[napi(module_exports)]
pub fn define_window_ms(mut exports: Object, env: Env) -> napi::Result<()> {
  let mut windows = Object::new(&env)?;
  for window in core_dims::QuotaWindow::ALL {
    windows.set(window.as_str(), window.ms() as f64)?;
  }
  windows.freeze()?;
  exports.set("WINDOW_MS", windows)?;
  Ok(())
}
