//! Property names as JavaScript strings, made once per environment: a name made anew is a
//! string V8 internalizes on every read (a third of a small call's cost). Node-API before
//! its experimental version refuses a reference to a string, so they are kept as the own
//! properties `"0"`, `"1"`, … of one referenced object that JavaScript never sees. They are
//! defined, not assigned, and read as own data properties: an accessor someone put on
//! `Object.prototype` is never called, on the store or on the read.

use napi::sys;
use rustc_hash::FxHashMap as HashMap;
use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};

/// At most this many names are kept per environment.
const MAX_KEYS: u32 = 256;

struct Names {
  object: sys::napi_ref,
  index: HashMap<String, u32>,
}

thread_local! {
  /// Per environment of this thread (a worker has its own thread; embedders may run
  /// several environments on one), dropped by the environment's cleanup hook, so a new
  /// environment made at a freed one's address never meets its reference.
  static KEYS: RefCell<HashMap<usize, Names>> = RefCell::new(HashMap::default());
}

/// How many names were made as new strings, process-wide (a kept name is not made again).
static NAMES_MADE: AtomicU64 = AtomicU64::new(0);

/// How many names were made as new strings, process-wide.
pub fn names_made() -> u64 {
  NAMES_MADE.load(Ordering::Relaxed)
}

/// The environment is going away: its names go with it (its references are freed by it).
unsafe extern "C" fn forget_names(env: *mut std::ffi::c_void) {
  let _ = KEYS.try_with(|keys| keys.borrow_mut().remove(&(env as usize)));
}

/// Property `name` of `object` and its `typeof` (one read gives both): `None` when it
/// cannot be read, `Some(None)` when it is `undefined`.
///
/// # Safety
/// `env` is the live environment of the running call and `object` an object made in it.
pub unsafe fn property(
  env: sys::napi_env,
  object: sys::napi_value,
  name: &str,
) -> Option<Option<(sys::napi_value, sys::napi_valuetype)>> {
  let key = name_key(env, name)?;
  let (mut value, mut kind) = (std::ptr::null_mut(), 0);
  // SAFETY: `env` and `object` are live (this function's contract); `key` was made on
  // `env`; the out-pointers are locals.
  let read = unsafe {
    sys::napi_get_property(env, object, key, &mut value) == sys::Status::napi_ok
      && sys::napi_typeof(env, value, &mut kind) == sys::Status::napi_ok
  };
  read.then_some((kind != sys::ValueType::napi_undefined).then_some((value, kind)))
}

/// `name` as a JavaScript string of `env`.
fn name_key(env: sys::napi_env, name: &str) -> Option<sys::napi_value> {
  KEYS.with(|keys| {
    let mut keys = keys.borrow_mut();
    // SAFETY: (every call below) N-API calls on the live environment of this call, with
    // handles made on it; the object's reference lives as long as the environment (the
    // cleanup hook drops the entry). None of these calls runs JavaScript: the object is
    // plain, its properties are own data properties defined by this function.
    unsafe {
      let names = match keys.entry(env as usize) {
        Entry::Occupied(names) => names.into_mut(),
        Entry::Vacant(slot) => {
          let (mut object, mut kept) = (std::ptr::null_mut(), std::ptr::null_mut());
          if sys::napi_create_object(env, &mut object) != sys::Status::napi_ok
            || sys::napi_create_reference(env, object, 1, &mut kept) != sys::Status::napi_ok
          {
            return make_key(env, name);
          }
          sys::napi_add_env_cleanup_hook(env, Some(forget_names), env.cast());
          slot.insert(Names {
            object: kept,
            index: HashMap::default(),
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
  NAMES_MADE.fetch_add(1, Ordering::Relaxed);
  let mut key = std::ptr::null_mut();
  // SAFETY: a string made on the live environment of this call.
  let made = unsafe {
    sys::napi_create_string_utf8(env, name.as_ptr().cast(), name.len() as isize, &mut key)
  };
  (made == sys::Status::napi_ok).then_some(key)
}
