//! The direct connection at the edge (docs/redis.md#the-direct-connection): per
//! JavaScript thread and Redis URL, one plain-TCP socket that this thread's own libuv loop
//! watches, so a command is written during the call that asks for it and its promise is
//! settled in the loop's callback — no hop to the I/O runtime and back. The wire, the
//! link's state machine and libuv are `src/store/redis/` (`direct.rs`, `link.rs`,
//! `uv.rs`); this file makes the promises, settles them from the links' outcomes, hands
//! the links this thread's loop and closes them with its environment (a cleanup hook); the
//! callback scope and the Bun check are `napi-raw/`'s.

use super::errors::js_error;
use crate::engine::redis_direct::{shared_command, DirectCall};
use crate::engine::redis_view::DirectPeek;
use crate::engine::Step;
use crate::error::QuotaError;
use crate::store::redis::direct::Outcome;
use crate::store::redis::link::Settled;
use crate::store::redis::uv::{self, Host, Links};
use crate::store::redis::RedisBackend;
use libc::c_void;
use napi::bindgen_prelude::ToNapiValue;
use napi::{sys, Env};
use napi_raw::scope;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;

/// What settles one call on the JS thread: the value to resolve with, or the error.
type Done = Box<dyn FnOnce(&Env, Outcome) -> napi::Result<sys::napi_value>>;

struct Call {
  deferred: sys::napi_deferred,
  done: Done,
}

/// The links' owner on one JS thread: its environment.
#[derive(Clone)]
struct Js(sys::napi_env);

impl Host for Js {
  type Call = Call;

  fn settle(&self, settled: Settled<Call>) {
    settle(self.0, settled)
  }

  fn spawn(&self, work: Pin<Box<dyn Future<Output = ()> + Send>>) {
    super::promise::ensure_runtime();
    napi::bindgen_prelude::spawn(work);
  }
}

thread_local! {
  static LINKS: RefCell<Option<Rc<Links<Js>>>> = const { RefCell::new(None) };
}

/// This thread's links, made at the first call that may use one (with the cleanup hook
/// that closes them); `None` when libuv is missing or not real.
fn links(env: &Env) -> Option<Rc<Links<Js>>> {
  let uv = uv::uv()?;
  if let Some(links) = LINKS.with(|l| l.borrow().clone()) {
    return Some(links);
  }
  if !scope::real_libuv(env) {
    return None;
  }
  let mut event_loop = ptr::null_mut();
  if unsafe { sys::napi_get_uv_event_loop(env.raw(), &mut event_loop) } != sys::Status::napi_ok {
    return None;
  }
  let links = Rc::new(Links::new(uv, Js(env.raw()), event_loop.cast()));
  LINKS.with(|l| *l.borrow_mut() = Some(links.clone()));
  unsafe { sys::napi_add_env_cleanup_hook(env.raw(), Some(teardown), env.raw().cast()) };
  Some(links)
}

/// Sends `command` (packed) on this thread's direct connection to `backend`, settling the
/// returned promise with `done` — or `None` when it cannot take it now (libuv not found,
/// connecting, or the shared connection has calls of this thread in flight).
fn send(
  env: &Env,
  backend: &Arc<RedisBackend>,
  command: &[u8],
  done: Done,
) -> Option<sys::napi_value> {
  let links = links(env)?;
  let mut promise = ptr::null_mut();
  let sent = links.send(backend, command, || {
    let mut deferred = ptr::null_mut();
    let made = unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) };
    (made == sys::Status::napi_ok).then_some(Call { deferred, done })
  });
  sent.then_some(promise)
}

/// A call of this thread for `backend` was sent on the shared connection (`true`) or
/// settled there (`false`).
fn shared(backend: &RedisBackend, sent: bool) {
  if let Some(links) = LINKS.with(|l| l.borrow().clone()) {
    links.shared(backend, sent);
  }
}

/// Settles `settled` inside one callback scope (so the promises' reactions run when it
/// closes, as after any I/O callback).
fn settle(env: sys::napi_env, settled: Vec<(Call, Outcome)>) {
  if settled.is_empty() {
    return;
  }
  // SAFETY: a libuv callback of this thread's loop, its environment alive.
  unsafe { scope::in_callback_scope(env, c"quota-engine:redis", |js| settle_in(js, settled)) }
}

fn settle_in(js: &Env, settled: Vec<(Call, Outcome)>) {
  for (call, outcome) in settled {
    // A panic must not unwind past the open scopes (Node aborts on unclosed ones).
    let done = call.done;
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| done(js, outcome)))
      .unwrap_or_else(|_| Err(napi::Error::from_reason("internal error")));
    // SAFETY: the deferred was made on this environment and is settled once.
    unsafe {
      match answer {
        Ok(value) => sys::napi_resolve_deferred(js.raw(), call.deferred, value),
        Err(err) => {
          let reason = match napi::JsError::from(err).into_value(js.raw()) {
            value if !value.is_null() => value,
            _ => js_error(js, QuotaError::Store("internal error".into())),
          };
          sys::napi_reject_deferred(js.raw(), call.deferred, reason)
        }
      };
    }
  }
}

/// The environment goes away: this thread's links close, their calls left unsettled (no
/// JavaScript runs any more).
unsafe extern "C" fn teardown(env: *mut c_void) {
  let _ = std::panic::catch_unwind(|| torn_down(env));
}

fn torn_down(env: *mut c_void) {
  // SAFETY: this thread's environment, in its cleanup hook.
  unsafe { scope::end_scopes(env.cast()) };
  if let Some(links) = LINKS.with(|l| l.borrow_mut().take()) {
    links.close_all();
  }
}

/// `work` on the shared connection (the I/O runtime), counted as this thread's call in
/// flight there until it settles; the promise as a raw value.
fn on_shared<T, V>(
  env: &Env,
  backend: &Arc<RedisBackend>,
  work: impl Future<Output = crate::error::Result<T>> + Send + 'static,
  map: impl FnOnce(&Env, T) -> napi::Result<V> + 'static,
) -> napi::Result<sys::napi_value>
where
  T: Send + 'static,
  V: ToNapiValue,
{
  shared(backend, true);
  let counted = backend.clone();
  let backend = backend.clone();
  super::promise::spawn_settled(
    env,
    async move { Ok(work.await) },
    move |env, result: crate::error::Result<T>| {
      shared(&backend, false);
      match result {
        Ok(value) => map(env, value),
        Err(err) => Err(super::errors::rejection(env, err)),
      }
    },
  )
  .map(|promise| napi::JsValue::raw(&promise))
  .inspect_err(|_| shared(&counted, false))
}

/// `call` on this thread's direct connection, its promise settled with its answer (a
/// step on the shared connection counted as this thread's there) — or `call` given back
/// when the direct connection cannot take it.
fn direct<D: DirectCall>(env: &Env, mut call: D) -> Result<sys::napi_value, D>
where
  D::Value: ToNapiValue,
{
  let (backend, packed) = (call.backend().clone(), call.take_packed());
  let target = backend.clone();
  let slot = Rc::new(RefCell::new(Some(call)));
  let held = slot.clone();
  let done: Done = Box::new(move |env, outcome| {
    let Some(call) = held.borrow_mut().take() else {
      return Err(napi::Error::from_reason("settled twice"));
    };
    match call.finish(super::engine(), outcome) {
      Step::Now(Ok(value)) => unsafe { ToNapiValue::to_napi_value(env.raw(), value) },
      Step::Now(Err(err)) => Err(super::errors::rejection(env, err)),
      Step::Later(future) => on_shared(env, &backend, future, |_, v| Ok(v)),
    }
  });
  send(env, &target, &packed, done).ok_or_else(|| slot.borrow_mut().take().expect("not sent"))
}

/// A raw command of the ioredis-like client: on this thread's direct connection when it
/// can take it, else on the shared one.
pub(crate) fn client_command(
  env: &Env,
  backend: Arc<RedisBackend>,
  words: Vec<String>,
) -> napi::Result<sys::napi_value> {
  let (backend, words) = match super::engine().direct_command(backend, words) {
    Ok(command) => match direct(env, command) {
      Ok(promise) => return Ok(promise),
      Err(command) => command.into_parts(),
    },
    Err(parts) => parts,
  };
  let work = shared_command(backend.clone(), words);
  on_shared(env, &backend, work, |_, value| Ok(value))
}

/// A peek's read on this thread's direct connection (the engine's [`DirectPeek`]), or the
/// read given back when there is none up.
pub(crate) fn peek(env: &Env, read: Box<DirectPeek>) -> Result<sys::napi_value, Box<DirectPeek>> {
  direct(env, read)
}

/// `resetRedisClient()` / `quit()`: this thread's links to `url` (every URL's with `None`)
/// close; their calls in flight fail as on a lost connection. Other threads' close at
/// their next call (their backend is no longer the URL's).
pub(crate) fn forget(url: Option<&str>) {
  if let Some(links) = LINKS.with(|l| l.borrow().clone()) {
    links.forget(url);
  }
}
