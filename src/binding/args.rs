//! JavaScript values as the engine reads arguments (`engine/input.rs`, which names the
//! field of every bad value), through napi-rs's safe API. `#[edge]` (the `macros/` crate)
//! reads each parameter of a native function through [`arg`].

use crate::engine::input::{Fault, Kind, Source};
use crate::error::Result;
use napi::bindgen_prelude::{
  FromNapiValue, Function, JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Object,
  Unknown,
};
use napi::{Env, JsValue, ValueType};
use std::ffi::CStr;

/// A JavaScript value and where it came from.
pub(crate) type Arg<'p, 'env> = crate::engine::input::Arg<'p, Unknown<'env>>;

/// `value` read as the argument `path`.
pub(crate) fn arg<'a>(value: Unknown<'a>, path: &'static str) -> Result<Arg<'static, 'a>> {
  Arg::new(value, path)
}

/// The reader `keep` of `#[edge]` (`macros/`): the argument itself, for the body to read.
pub(crate) fn keep<'a, 'p, 'env>(arg: &'a Arg<'p, 'env>) -> Result<&'a Arg<'p, 'env>> {
  Ok(arg)
}

fn reason(err: napi::Error) -> Fault {
  err.reason
}

fn kind_of(value_type: ValueType) -> Kind {
  match value_type {
    ValueType::Undefined => Kind::Undefined,
    ValueType::Null => Kind::Null,
    ValueType::Boolean => Kind::Boolean,
    ValueType::Number => Kind::Number,
    ValueType::String => Kind::String,
    ValueType::Symbol => Kind::Symbol,
    ValueType::Object => Kind::Object,
    ValueType::Function => Kind::Function,
    ValueType::External => Kind::External,
    ValueType::BigInt => Kind::BigInt,
    _ => Kind::Unknown,
  }
}

/// `value` as the object the engine checked it is.
fn object<'env>(value: &Unknown<'env>) -> Object<'env> {
  let value = value.value();
  Object::from_raw(value.env, value.value)
}

/// `name` as a C string in `buffer`, so reading a property allocates nothing; `None` when
/// it is longer or has a NUL in it (then it is made as a JavaScript string).
fn c_name<'b>(name: &str, buffer: &'b mut [u8; 64]) -> Option<&'b CStr> {
  let bytes = buffer.get_mut(..=name.len())?;
  bytes[..name.len()].copy_from_slice(name.as_bytes());
  CStr::from_bytes_with_nul(bytes).ok()
}

/// Each read is asked only of a value whose kind the engine checked, so each is one
/// N-API call that converts without coercing (and runs no JavaScript).
impl Source for Unknown<'_> {
  fn kind(&self) -> std::result::Result<Kind, Fault> {
    Ok(kind_of(self.get_type().map_err(reason)?))
  }

  fn number(&self) -> std::result::Result<f64, Fault> {
    f64::from_unknown(*self).map_err(reason)
  }

  fn string(&self) -> std::result::Result<String, Fault> {
    String::from_unknown(*self).map_err(|_| "reading a string".to_string())
  }

  fn boolean(&self) -> std::result::Result<bool, Fault> {
    bool::from_unknown(*self).map_err(reason)
  }

  fn property(&self, name: &str) -> std::result::Result<Option<(Self, Kind)>, Fault> {
    let object = object(self);
    let mut buffer = [0; 64];
    let value: napi::Result<Option<Self>> = match c_name(name, &mut buffer) {
      Some(name) => object.get_c_named_property_unchecked(name).map(Some),
      None => object.get(name),
    };
    let Some(value) = value.map_err(|_| format!("reading the property {name}"))? else {
      return Ok(None);
    };
    Ok(match value.kind()? {
      Kind::Undefined => None,
      kind => Some((value, kind)),
    })
  }

  /// An array as `Array.isArray` says, so a Proxy of one is one too (as it is to the host's
  /// own code); a revoked Proxy (which makes `Array.isArray` throw) is none, its exception
  /// cleared by napi-rs's call.
  fn is_array(&self) -> std::result::Result<bool, Fault> {
    if JsValue::is_array(self).map_err(reason)? {
      return Ok(true);
    }
    let array_is_array = || -> napi::Result<bool> {
      let global = Env::from_raw(self.value().env).get_global()?;
      let array: Object = global.get_named_property_unchecked("Array")?;
      let is_array: Function<Unknown, bool> = array.get_named_property("isArray")?;
      is_array.call(*self)
    };
    Ok(array_is_array().unwrap_or(false))
  }

  /// A Proxy's length is its `length` trap's answer, which must be an array length (an
  /// integer in `0..=2^32 - 1`); how many elements are read is bounded by the reader.
  fn length(&self) -> std::result::Result<u32, Fault> {
    // For anything but a real array this fails and throws nothing.
    if let Ok(length) = object(self).get_array_length_unchecked() {
      return Ok(length);
    }
    let length = match self.property("length")? {
      Some((length, Kind::Number)) => length.number()?,
      _ => return Err("a length that is not a number".to_string()),
    };
    ((0.0..=f64::from(u32::MAX)).contains(&length) && length.fract() == 0.0)
      .then_some(length as u32)
      .ok_or_else(|| format!("a length of {length}"))
  }

  fn element(&self, index: u32) -> std::result::Result<Option<(Self, Kind)>, Fault> {
    let element: Self = object(self).get_element(index).map_err(reason)?;
    // An `undefined` element (a hole) is kept: its kind says what it is.
    Ok(Some((element, element.kind()?)))
  }

  fn keys(&self) -> std::result::Result<Vec<String>, Fault> {
    let names = object(self)
      .get_all_property_names(
        KeyCollectionMode::OwnOnly,
        KeyFilter::Enumerable,
        KeyConversion::NumbersToStrings,
      )
      .map_err(reason)?;
    let mut keys = Vec::new();
    for i in 0..names.get_array_length().map_err(reason)? {
      let name: Unknown = names.get_element(i).map_err(reason)?;
      // Symbol keys are skipped.
      if name.kind()? == Kind::String {
        keys.push(name.string()?);
      }
    }
    Ok(keys)
  }
}
