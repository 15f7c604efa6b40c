//! The direct connection's event-loop side (docs/redis.md#the-direct-connection): per
//! JavaScript thread and Redis URL, one plain-TCP socket (`store/redis/direct.rs`) that
//! this thread's own libuv loop watches (`uv_poll`), so a command is written during the
//! call that asks for it and its promise is settled in the loop's callback — no hop to the
//! I/O runtime and back. libuv is the host's (Node exports it): its functions are looked up
//! at run time and, when one is missing, every call keeps the shared connection.
//!
//! A link connects on the I/O runtime (TCP, AUTH, SELECT) and calls use the shared
//! connection until it is up. A call that finds it up is written at once; replies settle
//! calls in order (pipelined). A lost connection settles what was in flight — reads are
//! sent again on the shared connection, writes fail as they would there — and the next
//! call connects again (at most once a second while that fails); no answer within
//! `QUOTA_STORE_REDIS_TIMEOUT_MS` fails every call in flight with the timeout's error and
//! drops the connection. The thread's links close with its environment (a cleanup hook).

use super::errors::js_error;
use crate::error::QuotaError;
use crate::store::redis::direct::{self, Outcome, Wire};
use crate::store::redis::RedisBackend;
use libc::{c_int, c_void};
use napi::{sys, Env};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::TcpStream;
use std::ptr;
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

type PollCb = unsafe extern "C" fn(*mut c_void, c_int, c_int);
type HandleCb = unsafe extern "C" fn(*mut c_void);

type HandleSize = unsafe extern "C" fn(c_int) -> usize;
type PollInit = unsafe extern "C" fn(*mut c_void, *mut c_void, c_int) -> c_int;
type PollStart = unsafe extern "C" fn(*mut c_void, c_int, PollCb) -> c_int;
type Stop = unsafe extern "C" fn(*mut c_void) -> c_int;
type TimerInit = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type TimerStart = unsafe extern "C" fn(*mut c_void, HandleCb, u64, u64) -> c_int;
type Close = unsafe extern "C" fn(*mut c_void, Option<HandleCb>);
type Ref = unsafe extern "C" fn(*mut c_void);

/// The libuv functions used, found in the host process.
struct Uv {
  handle_size: HandleSize,
  poll_init: PollInit,
  poll_start: PollStart,
  poll_stop: Stop,
  timer_init: TimerInit,
  timer_start: TimerStart,
  timer_stop: Stop,
  close: Close,
  ref_: Ref,
  unref: Ref,
}

const UV_POLL: c_int = 8;
const UV_TIMER: c_int = 13;
const UV_READABLE: c_int = 1;
const UV_WRITABLE: c_int = 2;
/// How long after a failed connect the next call tries again.
const RECONNECT: Duration = Duration::from_secs(1);

fn uv() -> Option<&'static Uv> {
  static UV: OnceLock<Option<Uv>> = OnceLock::new();
  UV.get_or_init(|| {
    #[cfg(unix)]
    unsafe {
      // SAFETY: each symbol is libuv's function of that name, whose C signature the type
      // spells (uv.h); a missing one leaves the direct connection off.
      macro_rules! find {
        ($name:literal, $ty:ty) => {{
          let found = libc::dlsym(libc::RTLD_DEFAULT, concat!($name, "\0").as_ptr().cast());
          if found.is_null() {
            return None;
          }
          std::mem::transmute::<*mut c_void, $ty>(found)
        }};
      }
      Some(Uv {
        handle_size: find!("uv_handle_size", HandleSize),
        poll_init: find!("uv_poll_init", PollInit),
        poll_start: find!("uv_poll_start", PollStart),
        poll_stop: find!("uv_poll_stop", Stop),
        timer_init: find!("uv_timer_init", TimerInit),
        timer_start: find!("uv_timer_start", TimerStart),
        timer_stop: find!("uv_timer_stop", Stop),
        close: find!("uv_close", Close),
        ref_: find!("uv_ref", Ref),
        unref: find!("uv_unref", Ref),
      })
    }
    #[cfg(not(unix))]
    None
  })
  .as_ref()
}

/// What settles one call on the JS thread: the value to resolve with, or the error.
type Done = Box<dyn FnOnce(&Env, Outcome) -> napi::Result<sys::napi_value>>;

struct Call {
  deferred: sys::napi_deferred,
  done: Done,
}

enum State {
  Idle { retry_at: Option<Instant> },
  Connecting(Arc<Mutex<Option<crate::error::Result<TcpStream>>>>),
  Up(Up),
}

struct Up {
  wire: Wire<Call>,
  poll: *mut c_void,
  timer: *mut c_void,
  /// The events the poll handle watches.
  events: c_int,
  timer_armed: bool,
  referenced: bool,
}

struct Link {
  env: sys::napi_env,
  backend: Arc<RedisBackend>,
  state: RefCell<State>,
  /// Calls of this link sent on the shared connection and not settled: the direct one
  /// waits for them, so one thread's calls stay in order.
  shared_in_flight: Cell<usize>,
}

thread_local! {
  static LINKS: RefCell<HashMap<String, Rc<Link>>> = RefCell::new(HashMap::new());
  static HOOKED: Cell<bool> = const { Cell::new(false) };
  static CONTEXT: Cell<sys::napi_async_context> = const { Cell::new(ptr::null_mut()) };
}

/// A handle's `data` (libuv's first field of every handle).
unsafe fn set_data(handle: *mut c_void, data: *const Link) {
  unsafe { *(handle as *mut *const Link) = data };
}

unsafe fn data(handle: *mut c_void) -> *const Link {
  unsafe { *(handle as *mut *const Link) }
}

fn alloc_handle(kind: c_int, uv: &Uv) -> *mut c_void {
  let size = unsafe { (uv.handle_size)(kind) };
  // Zeroed, 16-aligned: freed by `free_handle` once libuv closed it.
  unsafe { libc::calloc(1, size.max(16)) }
}

unsafe extern "C" fn free_handle(handle: *mut c_void) {
  unsafe { libc::free(handle) };
}

/// Sends `command` (packed) on this thread's direct connection to `backend` (one the
/// engine allows it for, `Engine::redis_direct`), settling the returned promise with
/// `done` — or `Err(done)` when there is none up (libuv not found, connecting, or the
/// shared connection has calls of this thread in flight): the caller sends it on the
/// shared connection instead.
pub(crate) fn send(
  env: &Env,
  backend: &Arc<RedisBackend>,
  command: &[u8],
  done: Done,
) -> Result<sys::napi_value, Done> {
  let Some(uv) = uv() else { return Err(done) };
  let Some(link) = link(env, backend) else {
    return Err(done);
  };
  if link.shared_in_flight.get() > 0 || !link.ready(uv) {
    return Err(done);
  }
  let mut deferred = ptr::null_mut();
  let mut promise = ptr::null_mut();
  if unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) }
    != sys::Status::napi_ok
  {
    return Err(done);
  }
  let timeout = backend.timeout();
  let mut state = link.state.borrow_mut();
  let State::Up(up) = &mut *state else {
    unreachable!("ready")
  };
  match up.wire.send(command, Call { deferred, done }, timeout) {
    Ok(()) => {
      up.watch(uv, Rc::as_ptr(&link));
      Ok(promise)
    }
    Err(err) => {
      drop(state);
      // This call is lost with the connection, with any before it.
      let lost = link.close(uv);
      let error = backend.classify(&redis::RedisError::from(err));
      settle_all(link.env, lost, |_| Outcome::Lost(error.clone()));
      Ok(promise)
    }
  }
}

/// This thread's link to `backend` (a new one when the URL's backend was replaced).
fn link(env: &Env, backend: &Arc<RedisBackend>) -> Option<Rc<Link>> {
  if !real_libuv(env) {
    return None;
  }
  // A link to a replaced backend is closed, and its calls settled, outside the borrow of
  // `LINKS`: settling may send again (a lost read goes to the shared connection).
  let (link, replaced) = LINKS.with(|links| {
    let mut links = links.borrow_mut();
    let mut replaced = None;
    if let Some(found) = links.get(backend.url()) {
      if Arc::ptr_eq(&found.backend, backend) {
        return (found.clone(), None);
      }
      replaced = links.remove(backend.url());
    }
    if !HOOKED.with(|h| h.replace(true)) {
      unsafe { sys::napi_add_env_cleanup_hook(env.raw(), Some(teardown), env.raw().cast()) };
    }
    let link = Rc::new(Link {
      env: env.raw(),
      backend: backend.clone(),
      state: RefCell::new(State::Idle { retry_at: None }),
      shared_in_flight: Cell::new(0),
    });
    links.insert(backend.url().to_string(), link.clone());
    (link, replaced)
  });
  if let (Some(old), Some(uv)) = (replaced, uv()) {
    let lost = old.close(uv);
    let error = QuotaError::Unavailable(format!(
      "the connection to Redis at {} was closed",
      backend.display()
    ));
    settle_all(old.env, lost, |_| Outcome::Lost(error.clone()));
  }
  Some(link)
}

/// Whether this runtime's libuv is real, asked once per thread: Bun resolves every `uv_*`
/// symbol to a stub that aborts the process, so under Bun (`process.versions.bun`) the
/// direct connection stays off.
fn real_libuv(env: &Env) -> bool {
  thread_local! {
    static REAL: Cell<Option<bool>> = const { Cell::new(None) };
  }
  REAL.with(|real| {
    if let Some(known) = real.get() {
      return known;
    }
    let known = !is_bun(env.raw());
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
      if sys::napi_typeof(env, value, &mut kind) != sys::Status::napi_ok {
        return true;
      }
      if kind != sys::ValueType::napi_object {
        // No `process` or `process.versions`: not Node, stay off.
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

/// A call of this thread for `backend` was sent on the shared connection (`true`) or
/// settled there (`false`).
pub(crate) fn shared(backend: &RedisBackend, sent: bool) {
  LINKS.with(|links| {
    if let Some(link) = links.borrow().get(backend.url()) {
      let n = link.shared_in_flight.get();
      link
        .shared_in_flight
        .set(if sent { n + 1 } else { n.saturating_sub(1) });
    }
  })
}

impl Link {
  /// Whether the connection is up; starts connecting (on the I/O runtime) when it is not,
  /// and takes over a socket that connected since.
  fn ready(&self, uv: &Uv) -> bool {
    let mut state = self.state.borrow_mut();
    match &*state {
      State::Up(_) => return true,
      State::Idle { retry_at } if retry_at.is_some_and(|t| Instant::now() < t) => return false,
      State::Idle { .. } => {
        let slot = Arc::new(Mutex::new(None));
        let filled = slot.clone();
        let backend = self.backend.clone();
        super::promise::ensure_runtime();
        napi::bindgen_prelude::spawn(async move {
          let result = direct::connect(&backend).await;
          *filled.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        });
        *state = State::Connecting(slot);
        return false;
      }
      State::Connecting(slot) => {
        let taken = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        match taken {
          None => return false,
          Some(Err(_)) => {
            *state = State::Idle {
              retry_at: Some(Instant::now() + RECONNECT),
            }
          }
          Some(Ok(stream)) => match self.open(uv, stream) {
            Some(up) => *state = State::Up(up),
            None => {
              *state = State::Idle {
                retry_at: Some(Instant::now() + RECONNECT),
              }
            }
          },
        }
      }
    }
    matches!(&*state, State::Up(_))
  }

  /// The wire over `stream` and its handles on this thread's loop.
  #[cfg(not(unix))]
  fn open(&self, _uv: &Uv, _stream: TcpStream) -> Option<Up> {
    // `uv()` finds no libuv off unix, so nothing connects; the shared connection serves.
    None
  }

  #[cfg(unix)]
  fn open(&self, uv: &Uv, stream: TcpStream) -> Option<Up> {
    let wire = Wire::new(stream).ok()?;
    let mut loop_ = ptr::null_mut();
    if unsafe { sys::napi_get_uv_event_loop(self.env, &mut loop_) } != sys::Status::napi_ok {
      return None;
    }
    let loop_ = loop_ as *mut c_void;
    let poll = alloc_handle(UV_POLL, uv);
    let timer = alloc_handle(UV_TIMER, uv);
    if poll.is_null() || timer.is_null() {
      unsafe {
        libc::free(poll);
        libc::free(timer);
      }
      return None;
    }
    let this = self as *const Link;
    unsafe {
      if (uv.poll_init)(loop_, poll, wire.fd()) != 0 {
        libc::free(poll);
        libc::free(timer);
        return None;
      }
      (uv.timer_init)(loop_, timer);
      set_data(poll, this);
      set_data(timer, this);
      (uv.poll_start)(poll, UV_READABLE, on_poll);
      // Idle, the connection does not keep the process alive.
      (uv.unref)(poll);
      (uv.unref)(timer);
    }
    Some(Up {
      wire,
      poll,
      timer,
      events: UV_READABLE,
      timer_armed: false,
      referenced: false,
    })
  }

  /// Closes the connection; the calls that were in flight, in order.
  fn close(&self, uv: &Uv) -> Vec<Call> {
    let previous = std::mem::replace(
      &mut *self.state.borrow_mut(),
      State::Idle { retry_at: None },
    );
    match previous {
      State::Up(mut up) => {
        unsafe {
          (uv.poll_stop)(up.poll);
          (uv.close)(up.poll, Some(free_handle));
          (uv.timer_stop)(up.timer);
          (uv.close)(up.timer, Some(free_handle));
        }
        up.wire.drain().collect()
      }
      _ => Vec::new(),
    }
  }
}

impl Up {
  /// Watches what the wire needs (writability while bytes wait), keeps the loop alive
  /// while calls are in flight and arms the timeout of the oldest.
  fn watch(&mut self, uv: &Uv, link: *const Link) {
    let events = if self.wire.wants_write() {
      UV_READABLE | UV_WRITABLE
    } else {
      UV_READABLE
    };
    if events != self.events {
      unsafe { (uv.poll_start)(self.poll, events, on_poll) };
      self.events = events;
    }
    let busy = self.wire.in_flight() > 0;
    if busy != self.referenced {
      unsafe {
        if busy {
          (uv.ref_)(self.poll)
        } else {
          (uv.unref)(self.poll)
        }
      };
      self.referenced = busy;
    }
    if busy && !self.timer_armed {
      if let Some(deadline) = self.wire.next_deadline() {
        let wait = deadline
          .saturating_duration_since(Instant::now())
          .as_millis() as u64;
        unsafe { set_data(self.timer, link) };
        unsafe { (uv.timer_start)(self.timer, on_timer, wait + 1, 0) };
        self.timer_armed = true;
      }
    }
  }
}

/// Settles `calls` with `outcome(i)` inside one callback scope (so the promises' reactions
/// run when it closes, as after any I/O callback).
fn settle_all(env: sys::napi_env, calls: Vec<Call>, outcome: impl Fn(usize) -> Outcome) {
  settle(
    env,
    calls
      .into_iter()
      .enumerate()
      .map(|(i, c)| (c, outcome(i)))
      .collect(),
  )
}

fn settle(env: sys::napi_env, settled: Vec<(Call, Outcome)>) {
  if settled.is_empty() {
    return;
  }
  unsafe {
    let mut handles = ptr::null_mut();
    sys::napi_open_handle_scope(env, &mut handles);
    let mut resource = ptr::null_mut();
    sys::napi_create_object(env, &mut resource);
    // One async context per thread, made at its first settle and ended with its
    // environment (`teardown`).
    let mut context = CONTEXT.with(Cell::get);
    if context.is_null() {
      let mut name = ptr::null_mut();
      sys::napi_create_string_utf8(env, c"quota-engine:redis".as_ptr(), 18, &mut name);
      sys::napi_async_init(env, resource, name, &mut context);
      CONTEXT.with(|c| c.set(context));
    }
    let mut scope = ptr::null_mut();
    let scoped =
      sys::napi_open_callback_scope(env, resource, context, &mut scope) == sys::Status::napi_ok;
    let js = Env::from_raw(env);
    for (call, outcome) in settled {
      // A panic must not unwind past the open scopes (Node aborts on unclosed ones).
      let done = call.done;
      let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| done(&js, outcome)))
        .unwrap_or_else(|_| Err(napi::Error::from_reason("internal error")));
      match answer {
        Ok(value) => sys::napi_resolve_deferred(env, call.deferred, value),
        Err(err) => {
          let reason = match napi::JsError::from(err).into_value(env) {
            value if !value.is_null() => value,
            _ => js_error(&js, QuotaError::Store("internal error".into())),
          };
          sys::napi_reject_deferred(env, call.deferred, reason)
        }
      };
    }
    if scoped {
      sys::napi_close_callback_scope(env, scope);
    }
    sys::napi_close_handle_scope(env, handles);
  }
}

/// The link whose handle fired, if this thread still has it.
fn fired(handle: *mut c_void) -> Option<Rc<Link>> {
  let wanted = unsafe { data(handle) };
  LINKS.with(|links| {
    links
      .borrow()
      .values()
      .find(|l| Rc::as_ptr(l) == wanted)
      .cloned()
  })
}

unsafe extern "C" fn on_poll(handle: *mut c_void, status: c_int, events: c_int) {
  // Unwinding out of a C callback aborts: a panic here only loses this wake-up.
  let _ = std::panic::catch_unwind(|| polled(handle, status, events));
}

fn polled(handle: *mut c_void, status: c_int, events: c_int) {
  let (Some(link), Some(uv)) = (fired(handle), uv()) else {
    return;
  };
  let mut settled = Vec::new();
  let failed = {
    let mut state = link.state.borrow_mut();
    let State::Up(up) = &mut *state else { return };
    let mut failed = None;
    if status < 0 {
      failed = Some(std::io::Error::other(format!("poll error {status}")));
    }
    if failed.is_none() && events & UV_WRITABLE != 0 {
      failed = up.wire.writable().err();
    }
    // Replies already received are taken even when the write failed (the server may have
    // answered and closed).
    if status >= 0 && events & UV_READABLE != 0 {
      let read = up.wire.readable(&mut settled).err();
      failed = failed.or(read);
    }
    if failed.is_none() {
      if up.wire.in_flight() == 0 && up.timer_armed {
        unsafe { (uv.timer_stop)(up.timer) };
        up.timer_armed = false;
      }
      up.watch(uv, Rc::as_ptr(&link));
    }
    failed
  };
  if let Some(err) = failed {
    // Closed before anything settles: a reaction that sends again must not find it up.
    let lost = link.close(uv);
    let error = link.backend.classify(&redis::RedisError::from(err));
    settled.extend(lost.into_iter().map(|c| (c, Outcome::Lost(error.clone()))));
  }
  settle(link.env, settled);
}

unsafe extern "C" fn on_timer(handle: *mut c_void) {
  let _ = std::panic::catch_unwind(|| timed_out(handle));
}

fn timed_out(handle: *mut c_void) {
  let (Some(link), Some(uv)) = (fired(handle), uv()) else {
    return;
  };
  let expired = {
    let mut state = link.state.borrow_mut();
    let State::Up(up) = &mut *state else { return };
    up.timer_armed = false;
    match up.wire.next_deadline() {
      Some(deadline) if deadline <= Instant::now() => true,
      Some(_) => {
        up.watch(uv, Rc::as_ptr(&link));
        false
      }
      None => false,
    }
  };
  if expired {
    // Replies after this one would be out of step: the connection goes.
    let lost = link.close(uv);
    let error = link.backend.timeout_error();
    settle_all(link.env, lost, |_| Outcome::TimedOut(error.clone()));
  }
}

/// The environment goes away: this thread's links close, their calls left unsettled (no
/// JavaScript runs any more).
unsafe extern "C" fn teardown(env: *mut c_void) {
  let _ = std::panic::catch_unwind(|| torn_down(env));
}

fn torn_down(env: *mut c_void) {
  let context = CONTEXT.with(|c| c.replace(ptr::null_mut()));
  if !context.is_null() {
    unsafe { sys::napi_async_destroy(env as sys::napi_env, context) };
  }
  let links: Vec<Rc<Link>> =
    LINKS.with(|links| links.borrow_mut().drain().map(|(_, l)| l).collect());
  HOOKED.with(|h| h.set(false));
  if let Some(uv) = uv() {
    for link in links {
      drop(link.close(uv));
    }
  }
}

/// `work` on the shared connection (the I/O runtime), counted as this thread's call in
/// flight there until it settles; the promise as a raw value.
pub(crate) fn on_shared<T, V>(
  env: &Env,
  backend: &Arc<RedisBackend>,
  work: impl std::future::Future<Output = crate::error::Result<T>> + Send + 'static,
  map: impl FnOnce(&Env, T) -> napi::Result<V> + 'static,
) -> napi::Result<sys::napi_value>
where
  T: Send + 'static,
  V: napi::bindgen_prelude::ToNapiValue,
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

/// A raw command of the ioredis-like client: on this thread's direct connection when it is
/// up, else on the shared one.
pub(crate) fn client_command(
  env: &Env,
  backend: Arc<RedisBackend>,
  words: Vec<String>,
) -> napi::Result<sys::napi_value> {
  use crate::store::redis::client;
  let shared_command = |env: &Env, backend: Arc<RedisBackend>, words: Vec<String>| {
    let on = backend.clone();
    on_shared(
      env,
      &on,
      async move { client::client_command(&backend, &words).await },
      |_, value| Ok(value),
    )
  };
  if uv().is_none() || !super::engine().redis_direct(&backend) {
    return shared_command(env, backend, words);
  }
  let Some(packed) = client::direct_command(&backend, &words) else {
    return shared_command(env, backend, words);
  };
  let (b, w) = (backend.clone(), words.clone());
  let done: Done = Box::new(
    move |env, outcome| match client::direct_reply(&b, &w, outcome) {
      Some(Ok(value)) => unsafe {
        napi::bindgen_prelude::ToNapiValue::to_napi_value(env.raw(), value)
      },
      Some(Err(err)) => Err(super::errors::rejection(env, err)),
      None => shared_command(env, b, w),
    },
  );
  match send(env, &backend, &packed, done) {
    Ok(promise) => Ok(promise),
    Err(_) => shared_command(env, backend, words),
  }
}

/// A peek's read on this thread's direct connection (the engine's [`DirectPeek`]), or the
/// read given back when there is none up.
pub(crate) fn peek(
  env: &Env,
  read: Box<crate::engine::redis_view::DirectPeek>,
) -> Result<sys::napi_value, Box<crate::engine::redis_view::DirectPeek>> {
  let backend = read.backend().clone();
  let target = backend.clone();
  let packed = read.packed();
  let slot = Rc::new(RefCell::new(Some(read)));
  let held = slot.clone();
  let done: Done = Box::new(move |env, outcome| {
    let Some(read) = held.borrow_mut().take() else {
      return Err(napi::Error::from_reason("settled twice"));
    };
    match read.finish(super::engine(), outcome) {
      Ok(Ok(value)) => unsafe {
        napi::bindgen_prelude::ToNapiValue::to_napi_value(env.raw(), value)
      },
      Ok(Err(err)) => Err(super::errors::rejection(env, err)),
      Err(crate::engine::Step::Now(Ok(value))) => unsafe {
        napi::bindgen_prelude::ToNapiValue::to_napi_value(env.raw(), value)
      },
      Err(crate::engine::Step::Now(Err(err))) => Err(super::errors::rejection(env, err)),
      Err(crate::engine::Step::Later(future)) => on_shared(env, &backend, future, |_, v| Ok(v)),
    }
  });
  match send(env, &target, &packed, done) {
    Ok(promise) => Ok(promise),
    Err(_) => Err(slot.borrow_mut().take().expect("not sent")),
  }
}

/// `resetRedisClient()` / `quit()`: this thread's links to `url` (every URL's with `None`)
/// close; their calls in flight fail as on a lost connection. Other threads' close at
/// their next call (their backend is no longer the URL's).
pub(crate) fn forget(url: Option<&str>) {
  let Some(uv) = uv() else { return };
  let closing: Vec<Rc<Link>> = LINKS.with(|links| {
    let mut links = links.borrow_mut();
    let urls: Vec<String> = links
      .keys()
      .filter(|u| url.is_none_or(|url| url == u.as_str()))
      .cloned()
      .collect();
    urls.iter().filter_map(|u| links.remove(u)).collect()
  });
  for link in closing {
    let lost = link.close(uv);
    let error = QuotaError::Unavailable(format!(
      "the connection to Redis at {} was closed",
      link.backend.display()
    ));
    settle_all(link.env, lost, |_| Outcome::Lost(error.clone()));
  }
}
