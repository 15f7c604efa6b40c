//! The hot path's string arguments, read in one N-API call: napi's `String` asks for the
//! length first (V8 measures the string) and then copies it, two passes over each of the
//! four ids on every crossing. Ids are short: they are copied into a stack buffer in one
//! pass, and only a longer one takes the two-call way.

use napi::bindgen_prelude::{FromNapiValue, TypeName, ValidateNapiValue};
use napi::{sys, ValueType};

/// A JavaScript string, as an owned `String`.
pub struct Text(pub String);

impl TypeName for Text {
  fn type_name() -> &'static str {
    "String"
  }

  fn value_type() -> ValueType {
    ValueType::String
  }
}

impl ValidateNapiValue for Text {}

/// Bytes copied in one call; a string that may not have fit is read again.
const INLINE: usize = 256;

impl FromNapiValue for Text {
  unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
    let mut buffer = [0u8; INLINE];
    let mut written = 0usize;
    // SAFETY: the buffer is INLINE bytes; N-API writes at most INLINE - 1 of them plus a
    // NUL, never part of a character, and fails (string expected) for a non-string.
    let status = unsafe {
      sys::napi_get_value_string_utf8(env, value, buffer.as_mut_ptr().cast(), INLINE, &mut written)
    };
    if status != sys::Status::napi_ok {
      return Err(napi::Error::new(
        napi::Status::StringExpected,
        "expected a string",
      ));
    }
    // Whole characters only: with 4 bytes or more to spare, nothing was left out.
    if written + 4 < INLINE {
      // SAFETY: V8 wrote valid UTF-8 (lone surrogates become U+FFFD).
      let text = unsafe { std::str::from_utf8_unchecked(&buffer[..written]) };
      return Ok(Text(text.to_owned()));
    }
    // SAFETY: as napi's own `String` conversion does.
    unsafe { String::from_napi_value(env, value) }.map(Text)
  }
}

/// The text of an optional argument, empty when absent.
pub(crate) fn text_or_empty(value: Option<Text>) -> String {
  value.map(|t| t.0).unwrap_or_default()
}
