//! The one conversion from the crate's error to a JavaScript error: thrown, or a promise's
//! rejection.

use crate::error::ArgErrorKind::{Range, Type};
use crate::error::QuotaError;
use napi::bindgen_prelude::Unknown;
use napi::{Env, Error, JsError, JsRangeError, JsTypeError, Status};

/// `err` as a JS error object of the right class (`TypeError`, `RangeError` or `Error`)
/// with its stable `code`.
fn js_error(env: &Env, err: QuotaError) -> Unknown<'_> {
  let js = Error::new(err.code(), err.to_string());
  match err {
    QuotaError::InvalidArg { kind: Type, .. } => JsTypeError::from(js).into_unknown(*env),
    QuotaError::InvalidArg { kind: Range, .. } => JsRangeError::from(js).into_unknown(*env),
    QuotaError::Store(_) | QuotaError::Unavailable(_) => JsError::from(js).into_unknown(*env),
  }
}

/// Throws `err` into `env` (see [`js_error`]) and returns the marker error napi-rs
/// expects after a throw.
pub(crate) fn throw(env: &Env, err: QuotaError) -> Error {
  let _ = env.throw(js_error(env, err));
  Error::from_status(Status::PendingException)
}

/// `err` wrapped for a promise's rejection (see [`js_error`]).
pub(crate) fn rejection(env: &Env, err: QuotaError) -> Error {
  Error::from(js_error(env, err))
}

/// Runs `f`, its error thrown into `env`: the shape of every native function that reads
/// its arguments and calls the engine.
pub(crate) fn call<T>(env: &Env, f: impl FnOnce() -> crate::error::Result<T>) -> napi::Result<T> {
  or_throw(env, f())
}

/// `result`, with its error thrown into `env`.
pub(crate) fn or_throw<T>(env: &Env, result: crate::error::Result<T>) -> napi::Result<T> {
  result.map_err(|err| throw(env, err))
}
