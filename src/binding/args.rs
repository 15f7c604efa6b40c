//! JavaScript values as the engine reads arguments (`engine/input.rs`, which names the
//! field of every bad value): each read is one N-API call. `#[edge]` (the `macros/` crate)
//! reads each parameter of a native function through [`arg`].

use crate::engine::input::{Fault, Kind, Source};
use crate::error::Result;
use napi::bindgen_prelude::{
  Array, FromNapiValue, JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Object, Unknown,
};
use napi::{sys, JsValue, ValueType};
use rustc_hash::FxHashMap;
use std::cell::RefCell;

/// At most this many property names are kept per thread (names are the engine's own field
/// names, plus the host's header names).
const MAX_KEYS: usize = 256;

thread_local! {
  /// Property names as JavaScript strings, made once per thread and environment: a name
  /// made anew is a string V8 internalizes on every read (a third of a `consume`'s cost).
  static KEYS: RefCell<(sys::napi_env, FxHashMap<String, sys::napi_ref>)> =
    RefCell::new((std::ptr::null_mut(), FxHashMap::default()));
}

/// `name` as a JavaScript string of `env`.
fn property_key(env: sys::napi_env, name: &str) -> Option<sys::napi_value> {
  let make = || {
    let mut key = std::ptr::null_mut();
    // SAFETY: a string made on the live environment of this call.
    let made = unsafe {
      sys::napi_create_string_utf8(env, name.as_ptr().cast(), name.len() as isize, &mut key)
    };
    (made == sys::Status::napi_ok).then_some(key)
  };
  KEYS.with(|keys| {
    let mut keys = keys.borrow_mut();
    let (owner, names) = &mut *keys;
    if *owner != env {
      // Another environment on this thread (the references of the last one are its own).
      names.clear();
      *owner = env;
    }
    let mut key = std::ptr::null_mut();
    if let Some(&kept) = names.get(name) {
      // SAFETY: a reference made on this environment, never deleted.
      if unsafe { sys::napi_get_reference_value(env, kept, &mut key) } == sys::Status::napi_ok {
        return Some(key);
      }
    }
    let key = make()?;
    if names.len() < MAX_KEYS {
      let mut kept = std::ptr::null_mut();
      // SAFETY: as above; the reference keeps the string for the environment's life.
      if unsafe { sys::napi_create_reference(env, key, 1, &mut kept) } == sys::Status::napi_ok {
        names.insert(name.to_string(), kept);
      }
    }
    Some(key)
  })
}

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
    // One N-API call for a short string (`raw_call::string`), not two.
    let value = self.value();
    let mut stack = [0u8; 256];
    // SAFETY: the engine reads a string only after checking the value is one.
    unsafe { super::raw_call::string(value.env, value.value, &mut stack) }
      .map(|text| text.into_owned())
      .ok_or_else(|| "reading a string".to_string())
  }

  fn boolean(&self) -> std::result::Result<bool, Fault> {
    unsafe { self.cast::<bool>() }.map_err(reason)
  }

  fn property(&self, name: &str) -> std::result::Result<Option<Self>, Fault> {
    let object = self.value();
    let (env, object) = (object.env, object.value);
    let key = property_key(env, name).ok_or_else(|| format!("reading the property {name}"))?;
    let mut value = std::ptr::null_mut();
    let mut kind = 0;
    // SAFETY: N-API calls on the live environment of this call; the engine asks for a
    // property only after checking the value is an object.
    let read = unsafe {
      sys::napi_get_property(env, object, key, &mut value) == sys::Status::napi_ok
        && sys::napi_typeof(env, value, &mut kind) == sys::Status::napi_ok
    };
    if !read {
      return Err(format!("reading the property {name}"));
    }
    if kind == sys::ValueType::napi_undefined {
      return Ok(None);
    }
    unsafe { Unknown::from_napi_value(env, value) }
      .map(Some)
      .map_err(reason)
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
