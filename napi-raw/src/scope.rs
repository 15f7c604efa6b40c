//! Running JavaScript from a libuv callback of the addon's own (not one napi-rs made): in
//! one callback scope, so promise reactions run when it closes, as after any I/O callback;
//! and whether the runtime's libuv is real at all.

use napi::{sys, Env};
use std::cell::Cell;
use std::ptr;

thread_local! {
  /// One async context per thread, made at its first scope and ended by [`end_scopes`].
  static CONTEXT: Cell<sys::napi_async_context> = const { Cell::new(ptr::null_mut()) };
}

/// Runs `f` inside a handle scope and a callback scope named `name`. A panic in `f` does not
/// unwind past the open scopes (Node aborts on unclosed ones): it is `f`'s to catch.
///
/// # Safety
/// `env` is the live environment of this thread, and no N-API call of this thread is
/// running (a libuv callback of its loop).
pub unsafe fn in_callback_scope(env: sys::napi_env, name: &std::ffi::CStr, f: impl FnOnce(&Env)) {
  unsafe {
    let mut handles = ptr::null_mut();
    sys::napi_open_handle_scope(env, &mut handles);
    let mut resource = ptr::null_mut();
    sys::napi_create_object(env, &mut resource);
    let mut context = CONTEXT.with(Cell::get);
    if context.is_null() {
      let mut text = ptr::null_mut();
      let length = name.to_bytes().len() as isize;
      sys::napi_create_string_utf8(env, name.as_ptr(), length, &mut text);
      sys::napi_async_init(env, resource, text, &mut context);
      CONTEXT.with(|c| c.set(context));
    }
    let mut scope = ptr::null_mut();
    let scoped =
      sys::napi_open_callback_scope(env, resource, context, &mut scope) == sys::Status::napi_ok;
    f(&Env::from_raw(env));
    if scoped {
      sys::napi_close_callback_scope(env, scope);
    }
    sys::napi_close_handle_scope(env, handles);
  }
}

/// This thread's environment goes away: its async context ends.
///
/// # Safety
/// `env` is this thread's environment, in its cleanup hook.
pub unsafe fn end_scopes(env: sys::napi_env) {
  let context = CONTEXT.with(|c| c.replace(ptr::null_mut()));
  if !context.is_null() {
    unsafe { sys::napi_async_destroy(env, context) };
  }
}

/// Whether this runtime's libuv is real, asked once per thread: Bun resolves every `uv_*`
/// symbol to a stub that aborts the process, so under Bun (`process.versions.bun`), or
/// with no `process.versions` at all, it is not.
pub fn real_libuv(env: &Env) -> bool {
  thread_local! {
    static REAL: Cell<Option<bool>> = const { Cell::new(None) };
  }
  REAL.with(|real| {
    let known = real.get().unwrap_or_else(|| !is_bun(env.raw()));
    real.set(Some(known));
    known
  })
}

fn is_bun(env: sys::napi_env) -> bool {
  // SAFETY: plain N-API reads on the calling thread's live environment.
  unsafe {
    let mut value = ptr::null_mut();
    if sys::napi_get_global(env, &mut value) != sys::Status::napi_ok {
      return true;
    }
    for name in [c"process", c"versions", c"bun"] {
      let mut kind = 0;
      if sys::napi_typeof(env, value, &mut kind) != sys::Status::napi_ok
        || kind != sys::ValueType::napi_object
      {
        return true;
      }
      let mut next = ptr::null_mut();
      if sys::napi_get_named_property(env, value, name.as_ptr(), &mut next) != sys::Status::napi_ok
      {
        return true;
      }
      value = next;
    }
    let mut kind = 0;
    sys::napi_typeof(env, value, &mut kind) != sys::Status::napi_ok
      || kind != sys::ValueType::napi_undefined
  }
}
