//! Packing buffers: memory of the addon's, allocated once per thread and freed with the
//! thread (after its JavaScript is gone), shown to JavaScript as an external
//! `Float64Array`. Whatever JavaScript does with that array — transfer it (Node copies an
//! external buffer), drop it, or tear its environment down — the addon's pointer stays
//! valid, so a call needs no N-API call to find its buffer.

use napi::bindgen_prelude::Unknown;
use napi::{sys, Env, Error, Status};
use std::cell::{Cell, RefCell};
use std::ptr::{self, NonNull};
use std::thread::LocalKey;

/// One thread's buffer: declare it in a `thread_local!` with [`PackedBuffer::new`].
pub struct PackedBuffer {
  memory: Cell<Option<(NonNull<f64>, usize)>>,
  /// The view shown to each environment of this thread (a module loaded again gets an
  /// environment of its own), each held by a reference deleted with its environment.
  shown: RefCell<Vec<(sys::napi_env, sys::napi_ref)>>,
}

impl PackedBuffer {
  pub const fn new() -> Self {
    PackedBuffer {
      memory: Cell::new(None),
      shown: RefCell::new(Vec::new()),
    }
  }

  /// The memory, allocated at the first ask.
  fn memory(&self, len: usize) -> (NonNull<f64>, usize) {
    if let Some(memory) = self.memory.get() {
      return memory;
    }
    let data = Box::into_raw(vec![0.0; len].into_boxed_slice()).cast::<f64>();
    let memory = (NonNull::new(data).expect("an allocation"), len);
    self.memory.set(Some(memory));
    memory
  }
}

impl Default for PackedBuffer {
  fn default() -> Self {
    Self::new()
  }
}

impl Drop for PackedBuffer {
  fn drop(&mut self) {
    if let Some((data, len)) = self.memory.take() {
      // SAFETY: allocated by `memory` as a boxed slice of `len`; the thread is ending, its
      // JavaScript environments are gone, and the views were external (V8 frees nothing).
      drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(data.as_ptr(), len)) });
    }
  }
}

/// This thread's `slot` buffer (`len` elements) as a `Float64Array` of `env`, the same one
/// on every call in one environment; `None` where the runtime allows no external buffers
/// (Electron's memory cage).
pub fn packed_buffer<'env>(
  env: &'env Env,
  len: usize,
  slot: &'static LocalKey<PackedBuffer>,
) -> napi::Result<Option<Unknown<'env>>> {
  let failed = |what| Err(Error::new(Status::GenericFailure, what));
  let raw = env.raw();
  let mut value = ptr::null_mut();
  let shown = slot.with(|b| {
    let shown = b.shown.borrow();
    shown.iter().find(|(e, _)| *e == raw).map(|(_, r)| *r)
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
  let (env, slot) =
    *unsafe { Box::from_raw(hook.cast::<(sys::napi_env, &'static LocalKey<PackedBuffer>)>()) };
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

/// `work` on this thread's `slot`; what went wrong otherwise: `"no buffer"`, `"bad
/// packing"` (`work` answered `None`) or `"internal error"` (a panic, which must not
/// unwind into Node).
///
/// # Safety
/// Called from a synchronous N-API callback on this thread, and `work` runs no
/// JavaScript: the buffer's JavaScript views are not used while `work` holds it.
pub unsafe fn on_buffer(
  slot: &'static LocalKey<PackedBuffer>,
  work: impl FnOnce(&mut [f64]) -> Option<()>,
) -> Result<(), &'static str> {
  let (data, len) = slot.with(|b| b.memory.get()).ok_or("no buffer")?;
  // SAFETY: the addon's own memory, alive for the thread, borrowed for this synchronous
  // call only (see the function's safety section).
  let memory = unsafe { std::slice::from_raw_parts_mut(data.as_ptr(), len) };
  match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(memory))) {
    Ok(Some(())) => Ok(()),
    Ok(None) => Err("bad packing"),
    Err(_) => Err("internal error"),
  }
}
