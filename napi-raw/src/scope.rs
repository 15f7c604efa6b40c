//! Promises settled from a libuv callback of the addon's own (not one napi-rs made): in one
//! callback scope, so their reactions run when it closes, as after any I/O callback; and
//! whether the runtime's libuv is real at all.

use napi::{sys, Env};
use std::cell::Cell;
use std::ptr;

thread_local! {
  /// One async context per thread, made at its first scope and ended by [`end_scopes`].
  static CONTEXT: Cell<sys::napi_async_context> = const { Cell::new(ptr::null_mut()) };
}

/// A promise to settle later, from a libuv callback.
pub struct Deferred(sys::napi_deferred);

/// A new promise of `env`: its deferred and the promise.
///
/// # Safety
/// `env` is the live environment of the running call.
pub unsafe fn promise(env: sys::napi_env) -> Option<(Deferred, sys::napi_value)> {
  let (mut deferred, mut promise) = (ptr::null_mut(), ptr::null_mut());
  let made = unsafe { sys::napi_create_promise(env, &mut deferred, &mut promise) };
  (made == sys::Status::napi_ok).then_some((Deferred(deferred), promise))
}

/// Settles each deferred of `settled` with what `answer` makes of its item — resolved with
/// the value, rejected with the error (or `fallback`'s when the error cannot be made a
/// value; a panic of `answer` rejects too) — all in one handle scope and one callback
/// scope named `name`. Nothing to settle opens no scope (so async hooks see none).
///
/// # Safety
/// `env` is the live environment of this thread, on its JS thread: in a libuv callback of
/// its loop, or inside a native call (where the callback scope nests, and its close runs no
/// microtask before the call returns).
pub unsafe fn settle_in_scope<T>(
  env: sys::napi_env,
  name: &std::ffi::CStr,
  settled: Vec<(Deferred, T)>,
  answer: impl Fn(&Env, T) -> napi::Result<sys::napi_value>,
  fallback: impl Fn(&Env) -> sys::napi_value,
) {
  if settled.is_empty() {
    return;
  }
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
    let js = Env::from_raw(env);
    for (Deferred(deferred), item) in settled {
      // A panic must not unwind past the open scopes (Node aborts on unclosed ones).
      let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answer(&js, item)))
        .unwrap_or_else(|_| Err(napi::Error::from_reason("internal error")));
      match answered {
        Ok(value) => sys::napi_resolve_deferred(env, deferred, value),
        Err(err) => {
          let reason = match napi::JsError::from(err).into_value(env) {
            value if !value.is_null() => value,
            _ => fallback(&js),
          };
          sys::napi_reject_deferred(env, deferred, reason)
        }
      };
    }
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
