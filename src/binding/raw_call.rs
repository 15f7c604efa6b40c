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

/// A JS thread's packing buffer: memory of the engine's, allocated once per thread and
/// freed with the thread (after its JavaScript is gone), shown to JavaScript as an external
/// `Float64Array`. Whatever JavaScript does with that array — transfer it (Node copies an
/// external buffer), drop it, or tear its environment down — the engine's pointer stays
/// valid, so a call needs no N-API call to find its buffer.
pub(crate) struct PackedBuffer {
  memory: std::cell::Cell<Option<(std::ptr::NonNull<f64>, usize)>>,
  /// The view shown to each environment of this thread (a module loaded again gets an
  /// environment of its own), each held by a reference deleted with its environment.
  shown: std::cell::RefCell<Vec<(sys::napi_env, sys::napi_ref)>>,
}

impl PackedBuffer {
  pub(crate) const fn new() -> Self {
    PackedBuffer {
      memory: std::cell::Cell::new(None),
      shown: std::cell::RefCell::new(Vec::new()),
    }
  }

  /// The memory, allocated at the first ask.
  fn memory(&self, len: usize) -> (std::ptr::NonNull<f64>, usize) {
    if let Some(memory) = self.memory.get() {
      return memory;
    }
    let data = Box::into_raw(vec![0.0; len].into_boxed_slice()).cast::<f64>();
    let memory = (std::ptr::NonNull::new(data).expect("an allocation"), len);
    self.memory.set(Some(memory));
    memory
  }
}

impl Drop for PackedBuffer {
  fn drop(&mut self) {
    if let Some((data, len)) = self.memory.take() {
      // SAFETY: allocated by `memory` as a boxed slice of `len`; the thread is ending, its
      // JavaScript environments are gone, and the views were external (V8 frees nothing).
      drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(data.as_ptr(), len)) });
    }
  }
}

/// This thread's `slot` buffer (`len` elements) as a `Float64Array` of `env`, the same one
/// on every call in one environment; `None` where the runtime allows no external buffers
/// (Electron's memory cage), and the glue then takes the checked entries.
pub(crate) fn packed_buffer<'env>(
  env: &'env Env,
  len: usize,
  slot: &'static std::thread::LocalKey<PackedBuffer>,
) -> napi::Result<Option<Unknown<'env>>> {
  let failed = |what| Err(Error::new(Status::GenericFailure, what));
  let raw = env.raw();
  let mut value = ptr::null_mut();
  let shown = slot.with(|b| {
    b.shown
      .borrow()
      .iter()
      .find(|(e, _)| *e == raw)
      .map(|(_, r)| *r)
  });
  // SAFETY (every block): plain N-API calls on the live environment of this call.
  if let Some(reference) = shown {
    if unsafe { sys::napi_get_reference_value(raw, reference, &mut value) } != sys::Status::napi_ok
    {
      return failed("could not find the buffer");
    }
    return Ok(Some(unsafe { Unknown::from_raw_unchecked(raw, value) }));
  }
  let (data, len) = slot.with(|b| b.memory(len));
  let mut array_buffer = ptr::null_mut();
  let status = unsafe {
    sys::napi_create_external_arraybuffer(
      raw,
      data.as_ptr().cast(),
      len * 8,
      None,
      ptr::null_mut(),
      &mut array_buffer,
    )
  };
  if status == sys::Status::napi_no_external_buffers_allowed {
    return Ok(None);
  }
  let mut reference = ptr::null_mut();
  let made = status == sys::Status::napi_ok
    && unsafe {
      sys::napi_create_typedarray(
        raw,
        sys::TypedarrayType::float64_array,
        len,
        array_buffer,
        0,
        &mut value,
      ) == sys::Status::napi_ok
        && sys::napi_create_reference(raw, value, 1, &mut reference) == sys::Status::napi_ok
    };
  if !made {
    return failed("could not make a buffer");
  }
  slot.with(|b| b.shown.borrow_mut().push((raw, reference)));
  let hook = Box::into_raw(Box::new((raw, slot))).cast();
  unsafe { sys::napi_add_env_cleanup_hook(raw, Some(forget_view), hook) };
  Ok(Some(unsafe { Unknown::from_raw_unchecked(raw, value) }))
}

/// An environment goes away: its view's reference is deleted and forgotten.
unsafe extern "C" fn forget_view(hook: *mut std::ffi::c_void) {
  // SAFETY: made by `packed_buffer` for this hook alone, and called once.
  let (env, slot) = *unsafe {
    Box::from_raw(hook.cast::<(sys::napi_env, &'static std::thread::LocalKey<PackedBuffer>)>())
  };
  let _ = std::panic::catch_unwind(|| {
    // The thread may be ending, its buffer already gone: then there is nothing to forget.
    let _ = slot.try_with(|b| {
      b.shown.borrow_mut().retain(|&(e, reference)| {
        if e == env {
          unsafe { sys::napi_delete_reference(env, reference) };
        }
        e != env
      })
    });
  });
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
  let fault = match slot.with(|b| b.memory.get()) {
    None => "no buffer",
    Some((data, len)) => {
      // SAFETY: the engine's own memory, alive for the thread, borrowed for this
      // synchronous call only: JavaScript on this thread waits, and nothing here calls back
      // into it.
      let memory = unsafe { std::slice::from_raw_parts_mut(data.as_ptr(), len) };
      match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(memory))) {
        Ok(Some(())) => "",
        Ok(None) => "bad packing",
        // Never expected; a panic must not unwind into Node.
        Err(_) => "internal error",
      }
    }
  };
  if fault.is_empty() {
    return ptr::null_mut();
  }
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
