//! The one conversion from the crate's error to a thrown JavaScript error.

use crate::error::{ArgErrorKind, QuotaError};
use napi::{Env, Error, JsError, JsRangeError, JsTypeError, Status};

/// Throws `err` into `env` as the right JS class (`TypeError`, `RangeError` or `Error`)
/// with its stable `code`, and returns the marker error napi-rs expects after a throw.
pub(crate) fn throw(env: &Env, err: QuotaError) -> Error {
  let code = err.code();
  let js = Error::new(code, err.to_string());
  // SAFETY: `env` is the live environment of the current call.
  unsafe {
    match &err {
      QuotaError::InvalidArg {
        kind: ArgErrorKind::Type,
        ..
      } => JsTypeError::from(js).throw_into(env.raw()),
      QuotaError::InvalidArg {
        kind: ArgErrorKind::Range,
        ..
      } => JsRangeError::from(js).throw_into(env.raw()),
      QuotaError::Store(_) | QuotaError::Unavailable(_) => JsError::from(js).throw_into(env.raw()),
    }
  }
  Error::from_status(Status::PendingException)
}

/// `result`, with its error thrown into `env`.
pub(crate) fn or_throw<T>(env: &Env, result: crate::error::Result<T>) -> napi::Result<T> {
  result.map_err(|err| throw(env, err))
}
