//! JavaScript values as the engine reads arguments (`engine/input.rs`, which names the
//! field of every bad value): each read is one N-API call (`napi-raw/`). `#[edge]` (the
//! `macros/` crate) reads each parameter of a native function through [`arg`].

use crate::engine::input::{Fault, Kind, Source};
use crate::error::Result;
use napi::bindgen_prelude::{
  FromNapiValue, JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Object, Unknown,
};
use napi::{JsValue, ValueType};
use napi_raw::{names, read};

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

impl Source for Unknown<'_> {
  fn kind(&self) -> std::result::Result<Kind, Fault> {
    Ok(kind_of(self.get_type().map_err(reason)?))
  }

  // SAFETY (each cast below): the engine reads a value only after checking its kind.
  fn number(&self) -> std::result::Result<f64, Fault> {
    // SAFETY: `Arg::number` reads only a value of kind Number.
    unsafe { self.cast::<f64>() }.map_err(reason)
  }

  fn string(&self) -> std::result::Result<String, Fault> {
    self.with_str(str::to_string)
  }

  fn with_str<T>(&self, f: impl FnOnce(&str) -> T) -> std::result::Result<T, Fault> {
    let value = self.value();
    let mut stack = [0u8; 256];
    // SAFETY: the engine reads a string only after checking the value is one.
    unsafe { read::string(value.env, value.value, &mut stack) }
      .map(|text| f(&text))
      .ok_or_else(|| "reading a string".to_string())
  }

  fn boolean(&self) -> std::result::Result<bool, Fault> {
    // SAFETY: `Arg::boolean` reads only a value of kind Boolean.
    unsafe { self.cast::<bool>() }.map_err(reason)
  }

  fn property(&self, name: &str) -> std::result::Result<Option<(Self, Kind)>, Fault> {
    let object = self.value();
    // SAFETY: the engine asks for a property only after checking the value is an object.
    let value = unsafe { names::property(object.env, object.value, name) }
      .ok_or_else(|| format!("reading the property {name}"))?;
    let Some((value, value_type)) = value else {
      return Ok(None);
    };
    let kind = kind_of(ValueType::from(value_type));
    // SAFETY: `value` is a handle `names::property` just returned on `object.env`.
    unsafe { Unknown::from_napi_value(object.env, value) }
      .map(|value| Some((value, kind)))
      .map_err(reason)
  }

  /// An array as `Array.isArray` says, so a Proxy of one is one too (as it is to the host's
  /// own code).
  fn is_array(&self) -> std::result::Result<bool, Fault> {
    let value = self.value();
    // SAFETY: N-API calls on the live environment of this call.
    Ok(unsafe { read::is_array(value.env, value.value) })
  }

  fn length(&self) -> std::result::Result<u32, Fault> {
    let value = self.value();
    // SAFETY: as above; the engine asks for a length only of an array.
    unsafe { read::array_length(value.env, value.value, MAX_PROXY_LENGTH) }
  }

  fn element(&self, index: u32) -> std::result::Result<Option<(Self, Kind)>, Fault> {
    // SAFETY: `Arg::elements` asks only of a value of kind Object that `is_array` accepted.
    let array = unsafe { self.cast::<Object>() }.map_err(reason)?;
    let element: Self = array.get_element(index).map_err(reason)?;
    // An `undefined` element (a hole) is kept: its kind says what it is.
    Ok(Some((element, element.kind()?)))
  }

  fn keys(&self) -> std::result::Result<Vec<String>, Fault> {
    // SAFETY: `Arg::keys` reads only a value of kind Object.
    let object = unsafe { self.cast::<Object>() }.map_err(reason)?;
    let names = object
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
      if name.get_type().map_err(reason)? == ValueType::String {
        // SAFETY: its type was just checked to be String.
        keys.push(unsafe { name.cast::<String>() }.map_err(reason)?);
      }
    }
    Ok(keys)
  }
}

/// The most elements a Proxy of an array is read for.
const MAX_PROXY_LENGTH: u32 = 65_536;
