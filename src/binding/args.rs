//! JavaScript values as the engine reads arguments (`engine/input.rs`, which names the
//! field of every bad value): each read is one N-API call. `#[edge]` (the `macros/` crate)
//! reads each parameter of a native function through [`arg`].

use crate::engine::input::{Fault, Kind, Source};
use crate::error::Result;
use napi::bindgen_prelude::{
  FromNapiValue, JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Object, Unknown,
};
use napi::{sys, JsValue, ValueType};
use rustc_hash::FxHashMap;
use std::cell::RefCell;

/// At most this many property names are kept per environment (names are the engine's own
/// field names, plus the host's header names).
const MAX_KEYS: u32 = 256;

/// Property names as JavaScript strings, made once per environment: a name made anew is a
/// string V8 internalizes on every read (a third of a `consume`'s cost). Node-API before
/// its experimental version refuses a reference to a string, so they are kept as the own
/// properties `"0"`, `"1"`, … of one referenced object that JavaScript never sees. They are
/// defined, not assigned, and read as own data properties: an accessor someone put on
/// `Object.prototype` is never called, on the store or on the read.
struct Names {
  object: sys::napi_ref,
  index: FxHashMap<String, u32>,
}

thread_local! {
  /// Per environment of this thread (a worker has its own thread; embedders may run
  /// several environments on one), dropped by the environment's cleanup hook, so a new
  /// environment made at a freed one's address never meets its reference.
  static KEYS: RefCell<FxHashMap<usize, Names>> = RefCell::new(FxHashMap::default());
}

/// How many property names were made as new strings, process-wide (a test hook reads it:
/// a kept name is not made again).
static NAMES_MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(feature = "test-hooks")]
pub(crate) fn names_made() -> u64 {
  NAMES_MADE.load(std::sync::atomic::Ordering::Relaxed)
}

/// The environment is going away: its names go with it (its references are freed by it).
unsafe extern "C" fn forget_names(env: *mut std::ffi::c_void) {
  let _ = KEYS.try_with(|keys| keys.borrow_mut().remove(&(env as usize)));
}

/// `name` as a JavaScript string of `env`.
fn property_key(env: sys::napi_env, name: &str) -> Option<sys::napi_value> {
  KEYS.with(|keys| {
    let mut keys = keys.borrow_mut();
    // SAFETY (every call below): N-API calls on the live environment of this call, with
    // handles made on it; the object's reference lives as long as the environment (the
    // cleanup hook drops the entry). None of these calls runs JavaScript: the object is
    // plain, its properties are own data properties defined by this function.
    unsafe {
      let names = match keys.entry(env as usize) {
        std::collections::hash_map::Entry::Occupied(names) => names.into_mut(),
        std::collections::hash_map::Entry::Vacant(slot) => {
          let (mut object, mut kept) = (std::ptr::null_mut(), std::ptr::null_mut());
          if sys::napi_create_object(env, &mut object) != sys::Status::napi_ok
            || sys::napi_create_reference(env, object, 1, &mut kept) != sys::Status::napi_ok
          {
            return make_key(env, name);
          }
          sys::napi_add_env_cleanup_hook(env, Some(forget_names), env.cast());
          slot.insert(Names {
            object: kept,
            index: FxHashMap::default(),
          })
        }
      };
      let mut object = std::ptr::null_mut();
      if sys::napi_get_reference_value(env, names.object, &mut object) != sys::Status::napi_ok
        || object.is_null()
      {
        return make_key(env, name);
      }
      if let Some(&at) = names.index.get(name) {
        let mut key = std::ptr::null_mut();
        if sys::napi_get_element(env, object, at, &mut key) == sys::Status::napi_ok {
          return Some(key);
        }
        // Kept, yet unreadable: a fresh one, not kept again (its slot stays its own).
        return make_key(env, name);
      }
      let key = make_key(env, name)?;
      let at = names.index.len() as u32;
      if at < MAX_KEYS {
        // Read-only, not configurable: nothing can change the slot once it is defined.
        let slot = std::ffi::CString::new(at.to_string()).ok()?;
        let property = sys::napi_property_descriptor {
          utf8name: slot.as_ptr(),
          name: std::ptr::null_mut(),
          method: None,
          getter: None,
          setter: None,
          value: key,
          attributes: sys::PropertyAttributes::default,
          data: std::ptr::null_mut(),
        };
        if sys::napi_define_properties(env, object, 1, &property) == sys::Status::napi_ok {
          names.index.insert(name.to_string(), at);
        }
      }
      Some(key)
    }
  })
}

/// `name` made as a new JavaScript string.
fn make_key(env: sys::napi_env, name: &str) -> Option<sys::napi_value> {
  NAMES_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
  let mut key = std::ptr::null_mut();
  // SAFETY: a string made on the live environment of this call.
  let made = unsafe {
    sys::napi_create_string_utf8(env, name.as_ptr().cast(), name.len() as isize, &mut key)
  };
  (made == sys::Status::napi_ok).then_some(key)
}

/// A JavaScript value and where it came from.
pub(crate) type Arg<'env> = crate::engine::input::Arg<Unknown<'env>>;

/// `value` read as the argument `path`.
pub(crate) fn arg<'a>(value: Unknown<'a>, path: &'static str) -> Result<Arg<'a>> {
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

  /// An array as `Array.isArray` says, so a Proxy of one is one too (as it is to the glue's
  /// packed crossings and to the host's own code).
  fn is_array(&self) -> std::result::Result<bool, Fault> {
    let object = unsafe { self.cast::<Object>() }.map_err(reason)?;
    if object.is_array().map_err(reason)? {
      return Ok(true);
    }
    let value = self.value();
    let (env, mut global, mut array, mut is_array, mut answer) =
      (value.env, ptr(), ptr(), ptr(), ptr());
    let mut yes = false;
    // SAFETY: plain N-API calls on the live environment of this call.
    let asked = unsafe {
      sys::napi_get_global(env, &mut global) == sys::Status::napi_ok
        && sys::napi_get_named_property(env, global, c"Array".as_ptr(), &mut array)
          == sys::Status::napi_ok
        && sys::napi_get_named_property(env, array, c"isArray".as_ptr(), &mut is_array)
          == sys::Status::napi_ok
        && sys::napi_call_function(env, array, is_array, 1, &value.value, &mut answer)
          == sys::Status::napi_ok
        && sys::napi_get_value_bool(env, answer, &mut yes) == sys::Status::napi_ok
    };
    if !asked {
      // A revoked Proxy throws from Array.isArray: it is no array (the caller's error names
      // the field), and its exception is not left pending.
      let mut thrown = ptr();
      unsafe { sys::napi_get_and_clear_last_exception(env, &mut thrown) };
      return Ok(false);
    }
    Ok(yes)
  }

  fn length(&self) -> std::result::Result<u32, Fault> {
    let value = self.value();
    let mut length = 0;
    // SAFETY: a plain N-API call on the live environment; for anything but a real array it
    // answers `napi_array_expected` and throws nothing.
    if unsafe { sys::napi_get_array_length(value.env, value.value, &mut length) }
      == sys::Status::napi_ok
    {
      return Ok(length);
    }
    // A Proxy of an array: its `length` is its trap's answer, held to what a real input
    // could need, so that a trap cannot make the engine read four billion elements.
    let length = self
      .property("length")?
      .ok_or_else(|| "reading the length".to_string())?;
    let length = unsafe { length.cast::<f64>() }.map_err(reason)?;
    ((0.0..=MAX_PROXY_LENGTH).contains(&length) && length.fract() == 0.0)
      .then_some(length as u32)
      .ok_or_else(|| format!("a length of {length}"))
  }

  fn element(&self, index: u32) -> std::result::Result<Option<Self>, Fault> {
    let array = unsafe { self.cast::<Object>() }.map_err(reason)?;
    array.get_element(index).map(Some).map_err(reason)
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

/// The most elements a Proxy of an array is read for.
const MAX_PROXY_LENGTH: f64 = 65_536.0;

fn ptr() -> sys::napi_value {
  std::ptr::null_mut()
}
