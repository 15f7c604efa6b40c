//! The scheduler's raw callbacks read their arguments with as few N-API calls as each needs:
//! a short string in one (napi-rs's `String` asks for the length first, then copies), and a
//! `Float64Array` as a slice.

use napi::sys;
use std::borrow::Cow;
use std::ptr;

/// A number, or `None` for anything else.
///
/// # Safety
/// `env` is the live environment of the running call and `value` a handle made in it (so
/// for every function here).
pub unsafe fn number(env: sys::napi_env, value: sys::napi_value) -> Option<f64> {
  let mut number = 0.0;
  // SAFETY: `env` and `value` are live (this function's contract); `number` is a local.
  let status = unsafe { sys::napi_get_value_double(env, value, &mut number) };
  (status == sys::Status::napi_ok).then_some(number)
}

/// A string, or `null`/`undefined` (`Some(None)`); `None` for anything else.
///
/// # Safety
/// As [`number`].
pub unsafe fn optional_string<'a>(
  env: sys::napi_env,
  value: sys::napi_value,
  stack: &'a mut [u8; 256],
) -> Option<Option<Cow<'a, str>>> {
  let mut kind = 0;
  // SAFETY: `env` and `value` are live (this function's contract); `kind` is a local.
  if unsafe { sys::napi_typeof(env, value, &mut kind) } != sys::Status::napi_ok {
    return None;
  }
  if kind == sys::ValueType::napi_null || kind == sys::ValueType::napi_undefined {
    return Some(None);
  }
  // SAFETY: the same live `env` and `value` (this function's contract).
  unsafe { string(env, value, stack) }.map(Some)
}

/// A string (`None` for anything else), read into `stack` when it fits (one N-API call),
/// else into a `String`.
///
/// # Safety
/// As [`number`].
pub unsafe fn string<'a>(
  env: sys::napi_env,
  value: sys::napi_value,
  stack: &'a mut [u8; 256],
) -> Option<Cow<'a, str>> {
  let mut length = 0;
  let into = stack.as_mut_ptr().cast();
  // SAFETY: `env` and `value` are live (this function's contract); `into` points at
  // `stack`, whose `stack.len()` bytes the call may write.
  let status =
    unsafe { sys::napi_get_value_string_utf8(env, value, into, stack.len(), &mut length) };
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
  // SAFETY: live `env` and `value`; a null buffer of size 0 asks only for the length.
  let status =
    unsafe { sys::napi_get_value_string_utf8(env, value, ptr::null_mut(), 0, &mut length) };
  if status != sys::Status::napi_ok {
    return None;
  }
  let mut bytes = vec![0u8; length + 1];
  let into = bytes.as_mut_ptr().cast();
  // SAFETY: live `env` and `value`; `into` points at `bytes`, `bytes.len()` bytes long.
  let status =
    unsafe { sys::napi_get_value_string_utf8(env, value, into, bytes.len(), &mut length) };
  if status != sys::Status::napi_ok {
    return None;
  }
  bytes.truncate(length);
  String::from_utf8(bytes).ok().map(Cow::Owned)
}

/// A `Float64Array`, as a mutable slice of its elements.
///
/// # Safety
/// As [`number`]; and no JavaScript runs while the slice is held (the caller waits, and
/// nothing calls back into it), so the array is neither read nor detached meanwhile.
pub unsafe fn float64_array<'a>(
  env: sys::napi_env,
  value: sys::napi_value,
) -> Option<&'a mut [f64]> {
  let (mut kind, mut length, mut data) = (0, 0, ptr::null_mut());
  let (mut array_buffer, mut byte_offset) = (ptr::null_mut(), 0);
  // SAFETY: `env` and `value` are live (this function's contract); every out-pointer is
  // a local.
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
  // SAFETY: `data` points at the `length` elements (byte offset applied); see above.
  Some(unsafe { std::slice::from_raw_parts_mut(data.cast::<f64>(), length) })
}
