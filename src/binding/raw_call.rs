//! Plain N-API callbacks for the hottest internal calls, bypassing napi-rs's generated
//! wrapper (measured: ~35 ns for a call without arguments, ~120 ns with one). Each
//! argument is read with one N-API call; a string goes into a stack buffer. Used by the
//! crossings of `quota_share.rs`, `fair_share.rs` and `burn_rate.rs`; everything else goes
//! through `#[napi(catch_unwind)]` and `args.rs`.

use napi::bindgen_prelude::{Object, Unknown};
use napi::{sys, Env, Error, JsValue, Status};
use std::borrow::Cow;
use std::ptr;

/// A plain N-API callback.
pub(crate) type RawCallback =
  unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// An object holding the raw callbacks `(property, function name, callback)`: how a
/// crossing is handed to `lib/` (by a call rather than on the exports, because the crate's
/// one `#[napi(module_exports)]` hook belongs to `WINDOW_MS`).
pub(crate) fn crossing_object<'env>(
  env: &'env Env,
  callbacks: &[(&std::ffi::CStr, &std::ffi::CStr, RawCallback)],
) -> napi::Result<Object<'env>> {
  let crossing = Object::new(env)?;
  for &(key, name, callback) in callbacks {
    let mut function = ptr::null_mut();
    // SAFETY: plain N-API calls on the live environment of this call.
    let created = unsafe {
      sys::napi_create_function(
        env.raw(),
        name.as_ptr(),
        name.to_bytes().len() as isize,
        Some(callback),
        ptr::null_mut(),
        &mut function,
      )
    };
    let set = created == sys::Status::napi_ok
      && unsafe {
        sys::napi_set_named_property(env.raw(), crossing.value().value, key.as_ptr(), function)
      } == sys::Status::napi_ok;
    if !set {
      return Err(Error::new(
        Status::GenericFailure,
        "could not create a crossing",
      ));
    }
  }
  Ok(crossing)
}

/// A JS thread's packing buffer: the `Float64Array` a packed crossing of `lib/` fills and
/// reads back, made once per thread so that a call crosses with no argument at all.
pub(crate) type PackedBuffer = std::cell::Cell<Option<Registered>>;

/// A packing buffer's elements and the strong reference that keeps them alive.
#[derive(Clone, Copy)]
pub(crate) struct Registered {
  data: *mut f64,
  len: usize,
  reference: sys::napi_ref,
}

/// This thread's `slot` buffer (`len` elements), made at the first call and held by a
/// strong reference that is never released: it lives as long as this thread's JavaScript
/// environment. A later call (the glue loaded again, as by a test runner's module reset)
/// gets the same buffer, so no earlier copy of the glue is left packing into one the
/// engine no longer reads.
pub(crate) fn packed_buffer<'env>(
  env: &'env Env,
  len: usize,
  slot: &'static std::thread::LocalKey<PackedBuffer>,
) -> napi::Result<Unknown<'env>> {
  let failed = |what| Err(Error::new(Status::GenericFailure, what));
  let mut value = ptr::null_mut();
  // SAFETY (every block): plain N-API calls on the live environment of this call.
  if let Some(registered) = slot.with(|b| b.get()) {
    if unsafe { sys::napi_get_reference_value(env.raw(), registered.reference, &mut value) }
      != sys::Status::napi_ok
    {
      return failed("could not find the buffer");
    }
    return Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), value) });
  }
  let (mut data, mut array_buffer) = (ptr::null_mut(), ptr::null_mut());
  let mut reference = ptr::null_mut();
  let made = unsafe {
    sys::napi_create_arraybuffer(env.raw(), len * 8, &mut data, &mut array_buffer)
      == sys::Status::napi_ok
      && sys::napi_create_typedarray(
        env.raw(),
        sys::TypedarrayType::float64_array,
        len,
        array_buffer,
        0,
        &mut value,
      ) == sys::Status::napi_ok
      && sys::napi_create_reference(env.raw(), value, 1, &mut reference) == sys::Status::napi_ok
  };
  if !made {
    return failed("could not make a buffer");
  }
  slot.with(|b| {
    b.set(Some(Registered {
      data: data.cast(),
      len,
      reference,
    }))
  });
  Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), value) })
}

/// The body of a packed crossing's callback `name`: `work` on this thread's `slot`; a
/// packing it rejects (`None`), a missing buffer or a panic throws `ERR_QUOTA_INTERNAL`
/// (only a bug in `lib/` gets there).
pub(crate) unsafe fn on_buffer(
  env: sys::napi_env,
  slot: &'static std::thread::LocalKey<PackedBuffer>,
  name: &str,
  work: impl FnOnce(&mut [f64]) -> Option<()>,
) -> sys::napi_value {
  let fault = match slot.with(|b| b.get()) {
    None => "no buffer",
    Some(registered) => {
      // SAFETY: the buffer's elements stay alive (a strong reference holds the array) and
      // unaliased for this synchronous call: its JavaScript thread waits, nothing here
      // calls back into JavaScript, and only this thread ever makes or reads it.
      let buffer = unsafe { std::slice::from_raw_parts_mut(registered.data, registered.len) };
      match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(buffer))) {
        Ok(Some(())) => return ptr::null_mut(),
        Ok(None) => "bad packing",
        // Never expected; a panic must not unwind into Node.
        Err(_) => "internal error",
      }
    }
  };
  let message = std::ffi::CString::new(format!("{name}: {fault}")).unwrap_or_default();
  unsafe { throw_internal(env, &message) }
}

/// Throws a `TypeError` with code `ERR_QUOTA_INTERNAL` and returns what a callback
/// returns after a throw. Raw callbacks are internal: only a bug in `lib/` gets here.
pub(crate) unsafe fn throw_internal(
  env: sys::napi_env,
  message: &std::ffi::CStr,
) -> sys::napi_value {
  unsafe { sys::napi_throw_type_error(env, c"ERR_QUOTA_INTERNAL".as_ptr(), message.as_ptr()) };
  ptr::null_mut()
}

/// The arguments of a callback; `None` unless exactly `N` were passed.
pub(crate) unsafe fn arguments<const N: usize>(
  env: sys::napi_env,
  info: sys::napi_callback_info,
) -> Option<[sys::napi_value; N]> {
  let mut argc = N;
  let mut argv = [ptr::null_mut(); N];
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

pub(crate) unsafe fn number(env: sys::napi_env, value: sys::napi_value) -> Option<f64> {
  let mut number = 0.0;
  let status = unsafe { sys::napi_get_value_double(env, value, &mut number) };
  (status == sys::Status::napi_ok).then_some(number)
}

/// A string argument, or `null`/`undefined` (`Some(None)`); `None` for anything else.
/// Read into `stack` when it fits (one N-API call), else into a `String`.
pub(crate) unsafe fn optional_string<'a>(
  env: sys::napi_env,
  value: sys::napi_value,
  stack: &'a mut [u8; 256],
) -> Option<Option<Cow<'a, str>>> {
  let mut kind = 0;
  if unsafe { sys::napi_typeof(env, value, &mut kind) } != sys::Status::napi_ok {
    return None;
  }
  if kind == sys::ValueType::napi_null || kind == sys::ValueType::napi_undefined {
    return Some(None);
  }
  unsafe { string(env, value, stack) }.map(Some)
}

/// A string argument (`None` for anything else), read into `stack` when it fits (one
/// N-API call), else into a `String`.
pub(crate) unsafe fn string<'a>(
  env: sys::napi_env,
  value: sys::napi_value,
  stack: &'a mut [u8; 256],
) -> Option<Cow<'a, str>> {
  let mut length = 0;
  let status = unsafe {
    sys::napi_get_value_string_utf8(
      env,
      value,
      stack.as_mut_ptr().cast(),
      stack.len(),
      &mut length,
    )
  };
  if status != sys::Status::napi_ok {
    return None;
  }
  // V8 writes whole characters only and stops before one that does not fit with the
  // terminating NUL: with room left for the longest character (4 bytes) the string was
  // complete. (Should some engine split a character, the UTF-8 check sends it the long
  // way.)
  if length + 4 < stack.len() {
    if let Ok(text) = std::str::from_utf8(&stack[..length]) {
      return Some(Cow::Borrowed(text));
    }
  }
  // Possibly truncated: ask for the whole length, then read it all.
  let status =
    unsafe { sys::napi_get_value_string_utf8(env, value, ptr::null_mut(), 0, &mut length) };
  if status != sys::Status::napi_ok {
    return None;
  }
  let mut bytes = vec![0u8; length + 1];
  let status = unsafe {
    sys::napi_get_value_string_utf8(
      env,
      value,
      bytes.as_mut_ptr().cast(),
      bytes.len(),
      &mut length,
    )
  };
  if status != sys::Status::napi_ok {
    return None;
  }
  bytes.truncate(length);
  String::from_utf8(bytes).ok().map(Cow::Owned)
}

/// The `Float64Array` argument, as a mutable slice of its elements.
pub(crate) unsafe fn float64_array<'a>(
  env: sys::napi_env,
  value: sys::napi_value,
) -> Option<&'a mut [f64]> {
  let mut kind = 0;
  let mut length = 0;
  let mut data = ptr::null_mut();
  let mut array_buffer = ptr::null_mut();
  let mut byte_offset = 0;
  let status = unsafe {
    sys::napi_get_typedarray_info(
      env,
      value,
      &mut kind,
      &mut length,
      &mut data,
      &mut array_buffer,
      &mut byte_offset,
    )
  };
  if status != sys::Status::napi_ok || kind != sys::TypedarrayType::float64_array {
    return None;
  }
  if length == 0 {
    return Some(&mut []);
  }
  // SAFETY: `data` points at the `length` elements of the typed array (byte offset already
  // applied), alive and unaliased for this synchronous call: the JavaScript caller waits,
  // and nothing here calls back into JavaScript.
  Some(unsafe { std::slice::from_raw_parts_mut(data.cast::<f64>(), length) })
}
