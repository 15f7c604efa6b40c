//! The hot path's string arguments, read in one N-API call: napi's `String` asks for the
//! length first (V8 measures the string) and then copies it, two passes over each of the
//! four ids on every crossing. Ids are short: they are copied into a stack buffer in one
//! pass (`raw_call::string`), and only a longer one takes the two-call way.

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

impl FromNapiValue for Text {
  unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
    let mut stack = [0u8; 256];
    // SAFETY: plain N-API calls on the live environment of this call; a non-string fails.
    match unsafe { super::raw_call::string(env, value, &mut stack) } {
      Some(text) => Ok(Text(text.into_owned())),
      None => Err(napi::Error::new(
        napi::Status::StringExpected,
        "expected a string",
      )),
    }
  }
}

/// The text of an optional argument, empty when absent.
pub(crate) fn text_or_empty(value: Option<Text>) -> String {
  value.map(|t| t.0).unwrap_or_default()
}
