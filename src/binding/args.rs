//! JavaScript values as the engine reads arguments (`engine/input.rs`, which names the
//! field of every bad value): each read is one N-API call. `#[edge]` (the `macros/` crate)
//! reads each parameter of a native function through [`arg`].

use crate::engine::input::{Fault, Kind, Source};
use crate::error::Result;
use napi::bindgen_prelude::{
  Array, JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Object, Unknown,
};
use napi::{JsValue, ValueType};

/// A JavaScript value and where it came from.
pub(crate) type Arg<'env> = crate::engine::input::Arg<Unknown<'env>>;

/// `value` read as the argument `path`.
pub(crate) fn arg<'a>(value: Unknown<'a>, path: &str) -> Result<Arg<'a>> {
  Arg::new(value, path)
}

/// The reader `keep` of `#[edge]` (`macros/`): the argument itself, for the body to read.
pub(crate) fn keep<'a, 'env>(arg: &'a Arg<'env>) -> Result<&'a Arg<'env>> {
  Ok(arg)
}

fn reason(err: napi::Error) -> Fault {
  err.reason
}

impl Source for Unknown<'_> {
  fn kind(&self) -> std::result::Result<Kind, Fault> {
    Ok(match self.get_type().map_err(reason)? {
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
    })
  }

  // SAFETY (each cast below): the engine reads a value only after checking its kind.
  fn number(&self) -> std::result::Result<f64, Fault> {
    unsafe { self.cast::<f64>() }.map_err(reason)
  }

  fn string(&self) -> std::result::Result<String, Fault> {
    unsafe { self.cast::<String>() }.map_err(reason)
  }

  fn boolean(&self) -> std::result::Result<bool, Fault> {
    unsafe { self.cast::<bool>() }.map_err(reason)
  }

  fn property(&self, name: &str) -> std::result::Result<Option<Self>, Fault> {
    let object = unsafe { self.cast::<Object>() }.map_err(reason)?;
    object.get(name).map_err(reason)
  }

  fn is_array(&self) -> std::result::Result<bool, Fault> {
    let object = unsafe { self.cast::<Object>() }.map_err(reason)?;
    object.is_array().map_err(reason)
  }

  fn length(&self) -> std::result::Result<u32, Fault> {
    Ok(unsafe { self.cast::<Array>() }.map_err(reason)?.len())
  }

  fn element(&self, index: u32) -> std::result::Result<Option<Self>, Fault> {
    let array = unsafe { self.cast::<Array>() }.map_err(reason)?;
    array.get(index).map_err(reason)
  }

  fn keys(&self) -> std::result::Result<Vec<String>, Fault> {
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
        keys.push(unsafe { name.cast::<String>() }.map_err(reason)?);
      }
    }
    Ok(keys)
  }
}
