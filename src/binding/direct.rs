//! The direct connection (docs/redis.md#the-direct-connection): one socket per JS thread
//! and Redis URL, watched by the thread's own libuv loop. The wire, the link and libuv are
//! `src/store/redis/`; this file makes the promises, settles them from the links' outcomes
//! and closes the links with the thread's environment.

use super::errors::js_error;
use crate::engine::redis_direct::{shared_command, DirectCall};
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
  deferred: scope::Deferred,
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

/// This thread's links, made at the first call that may use one; `None` without a real libuv.
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

/// Sends `command` on this thread's direct connection, its promise settled with `done`;
/// `None` when it cannot take it now (no libuv, connecting, or shared calls in flight).
fn send(
  env: &Env,
  backend: &Arc<RedisBackend>,
  command: &[u8],
  done: Done,
) -> Option<sys::napi_value> {
  let links = links(env)?;
  let mut promise = ptr::null_mut();
  let sent = links.send(backend, command, || {
    // SAFETY: the live environment of this call.
    let (deferred, made) = unsafe { scope::promise(env.raw()) }?;
    promise = made;
    Some(Call { deferred, done })
  });
  sent.then_some(promise)
}

/// A call of this thread was sent on the shared connection (`true`) or settled there.
fn shared(backend: &RedisBackend, sent: bool) {
  if let Some(links) = LINKS.with(|l| l.borrow().clone()) {
    links.shared(backend, sent);
  }
}

/// Settles `settled` (see [`scope::settle_in_scope`]).
fn settle(env: sys::napi_env, settled: Vec<(Call, Outcome)>) {
  let settled = settled
    .into_iter()
    .map(|(call, outcome)| (call.deferred, (call.done, outcome)))
    .collect();
  let internal = |js: &Env| js_error(js, QuotaError::Store("internal error".into()));
  // SAFETY: on this thread, its environment alive: in a libuv callback of its loop, or in
  // the native call whose send failed (`Links::send` settles what the failure ended).
  unsafe {
    let answer = |js: &Env, (done, outcome): (Done, Outcome)| done(js, outcome);
    scope::settle_in_scope(env, c"quota-engine:redis", settled, answer, internal)
  }
}

/// The environment goes away: this thread's links close, their calls left unsettled.
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

/// `work` on the shared connection, counted as this thread's call there until it settles.
fn on_shared<T: ToNapiValue + Send + 'static>(
  env: &Env,
  backend: &Arc<RedisBackend>,
  work: impl Future<Output = crate::error::Result<T>> + Send + 'static,
) -> napi::Result<sys::napi_value> {
  shared(backend, true);
  let counted = backend.clone();
  let backend = backend.clone();
  super::promise::spawn_settled(
    env,
    async move { Ok(work.await) },
    move |env, result: crate::error::Result<T>| {
      shared(&backend, false);
      result.map_err(|err| super::errors::rejection(env, err))
    },
  )
  .map(|promise| napi::JsValue::raw(&promise))
  .inspect_err(|_| shared(&counted, false))
}

/// `call` (a peek's read, say) on this thread's direct connection, or `call` given back when
/// it cannot take it.
pub(crate) fn direct<D: DirectCall>(env: &Env, mut call: D) -> Result<sys::napi_value, D>
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
      Step::Later(future) => on_shared(env, &backend, future),
    }
  });
  send(env, &target, &packed, done).ok_or_else(|| slot.borrow_mut().take().expect("not sent"))
}

/// A raw command of the ioredis-like client: direct when it can, else shared.
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
  on_shared(env, &backend, work)
}

/// `resetRedisClient()` / `quit()`: this thread's links to `url` (to every URL with `None`)
/// close; other threads' close at their next call.
pub(crate) fn forget(url: Option<&str>) {
  if let Some(links) = LINKS.with(|l| l.borrow().clone()) {
    links.forget(url);
  }
}
