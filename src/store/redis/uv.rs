//! libuv for the direct connection (docs/redis.md#the-direct-connection): the functions
//! found in the host process (Node exports libuv; when one is missing, every call keeps
//! the shared connection), the poll and timer handles that watch an up link's socket (the
//! link's [`Watcher`]), and one JavaScript thread's links, driven by those handles'
//! callbacks ([`Links`]).
//!
//! It lives here, beside the wire (`direct.rs`) and the link (`link.rs`), rather than in
//! the engine or the edge: only the direct connection uses libuv, and nothing here needs
//! napi — the edge hands over the thread's loop and settles what the links return
//! ([`Host`]).

use super::direct::Wire;
use super::link::{Link, Settled, Slot, Watcher};
use super::RedisBackend;
use libc::{c_int, c_void};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
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
pub struct Uv {
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

/// libuv's functions, when the host process has every one of them.
pub fn uv() -> Option<&'static Uv> {
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

/// What the links of one thread need from their owner (the edge).
pub trait Host: Clone + 'static {
  /// What a call is settled with.
  type Call: 'static;
  /// Settles `settled`, in order, on the loop's thread.
  fn settle(&self, settled: Settled<Self::Call>);
  /// Runs a connect on the I/O runtime.
  fn spawn(&self, work: Pin<Box<dyn Future<Output = ()> + Send>>);
}

/// An up link's poll and timer handles. Their `data` (libuv's first field of every handle)
/// is a [`Weak`] of the link's node, released when they close.
pub struct Handles {
  uv: &'static Uv,
  poll: *mut c_void,
  timer: *mut c_void,
  data: *const c_void,
  release: unsafe fn(*const c_void),
  polled: PollCb,
  timed: HandleCb,
}

impl Watcher for Handles {
  fn poll(&mut self, writable: bool) {
    let events = if writable {
      UV_READABLE | UV_WRITABLE
    } else {
      UV_READABLE
    };
    unsafe { (self.uv.poll_start)(self.poll, events, self.polled) };
  }

  fn keep_alive(&mut self, alive: bool) {
    unsafe {
      if alive {
        (self.uv.ref_)(self.poll)
      } else {
        (self.uv.unref)(self.poll)
      }
    }
  }

  fn arm(&mut self, after: Duration) {
    unsafe { (self.uv.timer_start)(self.timer, self.timed, after.as_millis() as u64, 0) };
  }

  fn disarm(&mut self) {
    unsafe { (self.uv.timer_stop)(self.timer) };
  }

  fn close(self) {
    unsafe {
      (self.uv.poll_stop)(self.poll);
      (self.uv.close)(self.poll, Some(free_handle));
      (self.uv.timer_stop)(self.timer);
      (self.uv.close)(self.timer, Some(free_handle));
      // No callback but the close's runs after `uv_close`: the node may go.
      (self.release)(self.data);
    }
  }
}

unsafe fn set_data(handle: *mut c_void, data: *const c_void) {
  unsafe { *(handle as *mut *const c_void) = data };
}

fn alloc_handle(kind: c_int, uv: &Uv) -> *mut c_void {
  let size = unsafe { (uv.handle_size)(kind) };
  // Zeroed, 16-aligned: freed by `free_handle` once libuv closed it.
  unsafe { libc::calloc(1, size.max(16)) }
}

unsafe extern "C" fn free_handle(handle: *mut c_void) {
  unsafe { libc::free(handle) };
}

/// One thread's link and its owner.
struct Node<H: Host> {
  host: H,
  link: RefCell<Link<H::Call, Handles>>,
}

/// The links of one JavaScript thread, one per Redis URL, watched by that thread's loop.
pub struct Links<H: Host> {
  uv: &'static Uv,
  host: H,
  event_loop: *mut c_void,
  by_url: RefCell<HashMap<String, Rc<Node<H>>>>,
}

impl<H: Host> Links<H> {
  /// No link yet, on the loop `event_loop` (a `uv_loop_t *`).
  pub fn new(uv: &'static Uv, host: H, event_loop: *mut c_void) -> Self {
    Links {
      uv,
      host,
      event_loop,
      by_url: RefCell::new(HashMap::new()),
    }
  }

  /// Sends `command` (packed) on the link to `backend` when it is writable (see
  /// [`Link::writable`]; starts connecting when it is idle), as the call `call` makes
  /// (`None`: nothing is sent); whether it was sent.
  pub fn send(
    &self,
    backend: &Arc<RedisBackend>,
    command: &[u8],
    call: impl FnOnce() -> Option<H::Call>,
  ) -> bool {
    let node = self.node(backend);
    let now = Instant::now();
    // The node's `Weak` is made only when a connect is taken over.
    let writable = node.link.borrow_mut().writable(
      now,
      |backend| self.connect(backend),
      |wire| self.open(wire, Rc::downgrade(&node)),
    );
    if !writable {
      return false;
    }
    let Some(call) = call() else { return false };
    let settled = node.link.borrow_mut().send(command, call, now);
    self.host.settle(settled);
    true
  }

  /// This thread's link to `backend` (a new one when the URL's backend was replaced: the
  /// old one closes, its calls settled outside the borrow, as settling may send again).
  fn node(&self, backend: &Arc<RedisBackend>) -> Rc<Node<H>> {
    let (node, replaced) = {
      let mut by_url = self.by_url.borrow_mut();
      match by_url.get(backend.url()) {
        Some(found) if Arc::ptr_eq(found.link.borrow().backend(), backend) => {
          return found.clone();
        }
        _ => {}
      }
      let node = Rc::new(Node {
        host: self.host.clone(),
        link: RefCell::new(Link::new(backend.clone())),
      });
      let replaced = by_url.insert(backend.url().to_string(), node.clone());
      (node, replaced)
    };
    if let Some(old) = replaced {
      let settled = old.link.borrow_mut().closed();
      self.host.settle(settled);
    }
    node
  }

  fn connect(&self, backend: &Arc<RedisBackend>) -> Slot {
    let slot: Slot = Arc::new(Mutex::new(None));
    let filled = slot.clone();
    let backend = backend.clone();
    self.host.spawn(Box::pin(async move {
      let result = super::direct::connect(&backend).await;
      *filled.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
    }));
    slot
  }

  /// The handles that watch `wire`'s socket on this thread's loop (readable, idle: not
  /// keeping the process alive).
  #[cfg(not(unix))]
  fn open(&self, _wire: &Wire<H::Call>, _node: Weak<Node<H>>) -> Option<Handles> {
    // `uv()` finds no libuv off unix, so nothing connects; the shared connection serves.
    None
  }

  #[cfg(unix)]
  fn open(&self, wire: &Wire<H::Call>, node: Weak<Node<H>>) -> Option<Handles> {
    let uv = self.uv;
    let poll = alloc_handle(UV_POLL, uv);
    let timer = alloc_handle(UV_TIMER, uv);
    if poll.is_null()
      || timer.is_null()
      || unsafe { (uv.poll_init)(self.event_loop, poll, wire.fd()) != 0 }
    {
      unsafe {
        libc::free(poll);
        libc::free(timer);
      }
      return None;
    }
    let data = Weak::into_raw(node).cast::<c_void>();
    unsafe {
      (uv.timer_init)(self.event_loop, timer);
      set_data(poll, data);
      set_data(timer, data);
      (uv.poll_start)(poll, UV_READABLE, on_poll::<H>);
      // Idle, the connection does not keep the process alive.
      (uv.unref)(poll);
      (uv.unref)(timer);
    }
    Some(Handles {
      uv,
      poll,
      timer,
      data,
      release: release::<H>,
      polled: on_poll::<H>,
      timed: on_timer::<H>,
    })
  }

  /// A call of this thread for `backend` was sent on the shared connection (`true`) or
  /// settled there (`false`).
  pub fn shared(&self, backend: &RedisBackend, sent: bool) {
    if let Some(node) = self.by_url.borrow().get(backend.url()) {
      node.link.borrow_mut().shared(sent);
    }
  }

  /// The links to `url` (every URL's with `None`) close; their calls in flight fail as on
  /// a lost connection.
  pub fn forget(&self, url: Option<&str>) {
    let closing: Vec<Rc<Node<H>>> = {
      let mut by_url = self.by_url.borrow_mut();
      let urls: Vec<String> = by_url
        .keys()
        .filter(|u| url.is_none_or(|url| url == u.as_str()))
        .cloned()
        .collect();
      urls.iter().filter_map(|u| by_url.remove(u)).collect()
    };
    for node in closing {
      let settled = node.link.borrow_mut().closed();
      self.host.settle(settled);
    }
  }

  /// The thread's environment goes away: every link closes, its calls left unsettled (no
  /// JavaScript runs any more).
  pub fn close_all(&self) {
    let nodes: Vec<Rc<Node<H>>> = self.by_url.borrow_mut().drain().map(|(_, n)| n).collect();
    for node in nodes {
      drop(node.link.borrow_mut().close());
    }
  }
}

/// The node a handle's `data` names, if it is still alive.
unsafe fn node<H: Host>(handle: *mut c_void) -> Option<Rc<Node<H>>> {
  let data = unsafe { *(handle as *const *const Node<H>) };
  // SAFETY: `data` came from `Weak::into_raw` and is released only when the handles
  // close, after which their callbacks no longer run; borrowed, not consumed, here.
  let weak = std::mem::ManuallyDrop::new(unsafe { Weak::from_raw(data) });
  weak.upgrade()
}

unsafe fn release<H: Host>(data: *const c_void) {
  drop(unsafe { Weak::from_raw(data.cast::<Node<H>>()) });
}

unsafe extern "C" fn on_poll<H: Host>(handle: *mut c_void, status: c_int, events: c_int) {
  // Unwinding out of a C callback aborts: a panic here only loses this wake-up.
  let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
    let Some(node) = (unsafe { node::<H>(handle) }) else {
      return;
    };
    let failed = (status < 0).then(|| std::io::Error::other(format!("poll error {status}")));
    let (readable, writable) = (events & UV_READABLE != 0, events & UV_WRITABLE != 0);
    let settled = node
      .link
      .borrow_mut()
      .polled(failed, readable, writable, Instant::now());
    node.host.settle(settled);
  }));
}

unsafe extern "C" fn on_timer<H: Host>(handle: *mut c_void) {
  let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
    let Some(node) = (unsafe { node::<H>(handle) }) else {
      return;
    };
    let settled = node.link.borrow_mut().timer_fired(Instant::now());
    node.host.settle(settled);
  }));
}
