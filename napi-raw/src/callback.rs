//! Plain N-API callbacks: the functions JavaScript calls without napi-rs's wrapper, handed
//! over in an object, and how one reads its arguments and throws.

use napi::bindgen_prelude::Object;
use napi::{sys, Env, Error, JsValue, Status};
use std::ffi::CStr;
use std::ptr;

/// A plain N-API callback.
pub type RawCallback =
  unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// An object holding the raw callbacks `(property, function name, callback)`.
pub fn crossing_object<'env>(
  env: &'env Env,
  callbacks: &[(&CStr, &CStr, RawCallback)],
) -> napi::Result<Object<'env>> {
  let crossing = Object::new(env)?;
  for &(key, name, callback) in callbacks {
    let mut function = ptr::null_mut();
    // SAFETY: plain N-API calls on the live environment of this call.
    let set = unsafe {
      sys::napi_create_function(
        env.raw(),
        name.as_ptr(),
        name.to_bytes().len() as isize,
        Some(callback),
        ptr::null_mut(),
        &mut function,
      ) == sys::Status::napi_ok
        && sys::napi_set_named_property(env.raw(), crossing.value().value, key.as_ptr(), function)
          == sys::Status::napi_ok
    };
    if !set {
      return Err(Error::new(
        Status::GenericFailure,
        "could not create a crossing",
      ));
    }
  }
  Ok(crossing)
}

/// The arguments of a callback; `None` unless exactly `N` were passed.
///
/// # Safety
/// `env` and `info` are the ones N-API passed to the running callback.
pub unsafe fn arguments<const N: usize>(
  env: sys::napi_env,
  info: sys::napi_callback_info,
) -> Option<[sys::napi_value; N]> {
  let mut argc = N;
  let mut argv = [ptr::null_mut(); N];
  // SAFETY: `env` and `info` are the running callback's (this function's contract);
  // `argv` has room for `argc` (= N) handles.
  let status = unsafe {
    sys::napi_get_cb_info(
      env,
      info,
      &mut argc,
      argv.as_mut_ptr(),
      ptr::null_mut(),
      ptr::null_mut(),
    )
  };
  (status == sys::Status::napi_ok && argc == N).then_some(argv)
}

/// Throws a `TypeError` with `code` and `message`; returns what a callback returns after
/// a throw.
///
/// # Safety
/// `env` is the live environment of the running callback.
pub unsafe fn throw_type_error(env: sys::napi_env, code: &CStr, message: &str) -> sys::napi_value {
  let message = std::ffi::CString::new(message).unwrap_or_default();
  // SAFETY: `env` is live (this function's contract); `code` and `message` are
  // NUL-terminated and outlive the call.
  unsafe { sys::napi_throw_type_error(env, code.as_ptr(), message.as_ptr()) };
  ptr::null_mut()
}

/// Runs `f`, a panic inside it thrown as an `Error` with `code` and the message
/// `<prefix>: <panic message>` (a panic must not unwind into Node, which would abort).
pub fn catch_panic<T>(
  env: &Env,
  code: &str,
  prefix: &str,
  f: impl FnOnce() -> napi::Result<T>,
) -> napi::Result<T> {
  match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
    Ok(result) => result,
    Err(payload) => {
      let detail = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
      // A payload whose destructor panics again must not unwind from here.
      std::mem::forget(payload);
      let error = Error::new(code, format!("{prefix}: {detail}"));
      // SAFETY: `env` is the live environment of the current call.
      unsafe { napi::JsError::from(error).throw_into(env.raw()) };
      Err(Error::from_status(Status::PendingException))
    }
  }
}
