//! The direct connection's link (docs/redis.md#the-direct-connection): the state machine of
//! one JavaScript thread's connection to one Redis URL — idle, connecting on the I/O
//! runtime, or up over a [`Wire`] that the thread's event loop watches — and what each
//! event settles. It is generic over the call (`C`: what its owner settles, a promise at
//! the edge) and over the loop's side ([`Watcher`]: libuv's handles in `uv.rs`, a fake in
//! the tests below), and time is a parameter, so every rule here is tested without Node.
//!
//! A call that finds the link up is written at once; replies settle calls in order
//! (pipelined). A link connects when a call finds it idle, and calls use the shared
//! connection until it is up; after a failed connect the next try waits [`RECONNECT`]. A
//! lost connection settles what was in flight with [`Outcome::Lost`] (the owner sends a
//! read again on the shared connection); no answer within the backend's timeout fails
//! every call in flight with its error ([`Outcome::TimedOut`]) and drops the connection.
//! While calls of this thread are in flight on the shared connection, the direct one waits
//! for them, so one thread's calls stay in order.
//!
//! Every method that settles returns the calls with their outcomes after the link is
//! already in its new state: a settlement that sends again (a lost read) must find the
//! link closed, not the connection that just failed.

use super::direct::{Outcome, Wire};
use super::RedisBackend;
use crate::error::QuotaError;
use std::io;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long after a failed connect the next call tries again.
pub const RECONNECT: Duration = Duration::from_secs(1);

/// Calls with how they ended, in the order they were sent.
pub type Settled<C> = Vec<(C, Outcome)>;

/// Where a connect on the I/O runtime leaves its socket (or its error).
pub type Slot = Arc<Mutex<Option<crate::error::Result<TcpStream>>>>;

/// The event loop's side of an up link: the handles that watch its socket (always for
/// readability) and time its oldest call.
pub trait Watcher {
  /// Watch for writability too (`true`), or readability only.
  fn poll(&mut self, writable: bool);
  /// Keep the event loop alive (calls in flight) or not (idle).
  fn keep_alive(&mut self, alive: bool);
  /// Fire the timer once, `after` from now.
  fn arm(&mut self, after: Duration);
  /// Stop the timer.
  fn disarm(&mut self);
  /// Stop watching and release the handles.
  fn close(self);
}

enum State<C, W> {
  Idle { retry_at: Option<Instant> },
  Connecting(Slot),
  Up(Up<C, W>),
}

struct Up<C, W> {
  wire: Wire<C>,
  watcher: W,
  /// What the watcher was last told.
  writable: bool,
  alive: bool,
  timer_armed: bool,
}

/// One thread's link to one backend.
pub struct Link<C, W: Watcher> {
  backend: Arc<RedisBackend>,
  state: State<C, W>,
  /// Calls of this thread sent on the shared connection and not settled.
  shared_in_flight: usize,
}

impl<C, W: Watcher> Link<C, W> {
  /// An idle link to `backend`.
  pub fn new(backend: Arc<RedisBackend>) -> Self {
    Link {
      backend,
      state: State::Idle { retry_at: None },
      shared_in_flight: 0,
    }
  }

  pub fn backend(&self) -> &Arc<RedisBackend> {
    &self.backend
  }

  /// A call of this thread was sent on the shared connection (`true`) or settled there.
  pub fn shared(&mut self, sent: bool) {
    self.shared_in_flight = if sent {
      self.shared_in_flight + 1
    } else {
      self.shared_in_flight.saturating_sub(1)
    };
  }

  /// Whether a call may be written on the link now: it is up and no call of this thread
  /// is in flight on the shared connection. When it is idle (and not waiting out
  /// [`RECONNECT`]), starts connecting (`connect` fills the slot from the I/O runtime);
  /// when a connect finished, takes the socket over (`open` makes its watcher).
  pub fn writable(
    &mut self,
    now: Instant,
    connect: impl FnOnce(&Arc<RedisBackend>) -> Slot,
    open: impl FnOnce(&Wire<C>) -> Option<W>,
  ) -> bool {
    self.shared_in_flight == 0 && self.ready(now, connect, open)
  }

  fn ready(
    &mut self,
    now: Instant,
    connect: impl FnOnce(&Arc<RedisBackend>) -> Slot,
    open: impl FnOnce(&Wire<C>) -> Option<W>,
  ) -> bool {
    match &self.state {
      State::Up(_) => return true,
      State::Idle { retry_at } if retry_at.is_some_and(|t| now < t) => return false,
      State::Idle { .. } => {
        self.state = State::Connecting(connect(&self.backend));
        return false;
      }
      State::Connecting(slot) => {
        let taken = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        let up = match taken {
          None => return false,
          Some(Err(_)) => None,
          Some(Ok(stream)) => Wire::new(stream).ok().and_then(|wire| {
            let watcher = open(&wire)?;
            Some(Up {
              wire,
              watcher,
              writable: false,
              alive: false,
              timer_armed: false,
            })
          }),
        };
        self.state = match up {
          Some(up) => State::Up(up),
          None => State::Idle {
            retry_at: Some(now + RECONNECT),
          },
        };
      }
    }
    matches!(self.state, State::Up(_))
  }

  /// Writes `command` (packed) for `call`, which waits for its reply; what is settled
  /// now — nothing, or (the connection failed) this call and every one before it, lost.
  /// Only after [`Link::writable`] said yes.
  pub fn send(&mut self, command: &[u8], call: C, now: Instant) -> Settled<C> {
    let State::Up(up) = &mut self.state else {
      let error = QuotaError::Unavailable("the direct connection is not up".into());
      return vec![(call, Outcome::Lost(error))];
    };
    match up.wire.send(command, call, now + self.backend.timeout()) {
      Ok(()) => {
        up.watch(now);
        Vec::new()
      }
      Err(err) => self.lose(err),
    }
  }

  /// The loop saw the socket readable and/or writable, or reported an error (`failed`):
  /// the replies that arrived settle their calls; a failure loses the rest.
  pub fn polled(
    &mut self,
    failed: Option<io::Error>,
    readable: bool,
    writable: bool,
    now: Instant,
  ) -> Settled<C> {
    let State::Up(up) = &mut self.state else {
      return Vec::new();
    };
    let mut settled = Vec::new();
    let polled = failed.is_none();
    let mut failed = failed;
    if failed.is_none() && writable {
      failed = up.wire.writable().err();
    }
    // Replies already received are taken even when the write failed (the server may have
    // answered and closed).
    if polled && readable {
      let read = up.wire.readable(&mut settled).err();
      failed = failed.or(read);
    }
    match failed {
      None => {
        if up.wire.in_flight() == 0 && up.timer_armed {
          up.watcher.disarm();
          up.timer_armed = false;
        }
        up.watch(now);
      }
      Some(err) => settled.extend(self.lose(err)),
    }
    settled
  }

  /// The timer fired: when the oldest call's deadline passed, every call in flight fails
  /// with the timeout's error and the connection goes (replies after it would be out of
  /// step); else the timer is armed for the oldest call's deadline.
  pub fn timer_fired(&mut self, now: Instant) -> Settled<C> {
    let State::Up(up) = &mut self.state else {
      return Vec::new();
    };
    up.timer_armed = false;
    match up.wire.next_deadline() {
      Some(deadline) if deadline <= now => {
        let error = self.backend.timeout_error();
        self.settle_all(|| Outcome::TimedOut(error.clone()))
      }
      Some(_) => {
        up.watch(now);
        Vec::new()
      }
      None => Vec::new(),
    }
  }

  /// Closes the link (its backend was replaced, or the URL's connection reset): the calls
  /// in flight are lost as on a dropped connection.
  pub fn closed(&mut self) -> Settled<C> {
    let error = QuotaError::Unavailable(format!(
      "the connection to Redis at {} was closed",
      self.backend.display()
    ));
    self.settle_all(|| Outcome::Lost(error.clone()))
  }

  /// Closes the link; the calls that were in flight, in order, unsettled.
  pub fn close(&mut self) -> Vec<C> {
    match std::mem::replace(&mut self.state, State::Idle { retry_at: None }) {
      State::Up(mut up) => {
        let calls = up.wire.drain().collect();
        up.watcher.close();
        calls
      }
      _ => Vec::new(),
    }
  }

  fn lose(&mut self, err: io::Error) -> Settled<C> {
    let error = self.backend.classify(&redis::RedisError::from(err));
    self.settle_all(|| Outcome::Lost(error.clone()))
  }

  fn settle_all(&mut self, outcome: impl Fn() -> Outcome) -> Settled<C> {
    self.close().into_iter().map(|c| (c, outcome())).collect()
  }
}

impl<C, W: Watcher> Up<C, W> {
  /// Watches what the wire needs (writability while bytes wait), keeps the loop alive
  /// while calls are in flight and arms the timeout of the oldest.
  fn watch(&mut self, now: Instant) {
    let writable = self.wire.wants_write();
    if writable != self.writable {
      self.watcher.poll(writable);
      self.writable = writable;
    }
    let busy = self.wire.in_flight() > 0;
    if busy != self.alive {
      self.watcher.keep_alive(busy);
      self.alive = busy;
    }
    if busy && !self.timer_armed {
      if let Some(deadline) = self.wire.next_deadline() {
        // A millisecond late rather than early: the timer then finds the deadline passed.
        let wait = deadline.saturating_duration_since(now) + Duration::from_millis(1);
        self.watcher.arm(wait);
        self.timer_armed = true;
      }
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::store::redis::{parse_target, RedisOptions};
  use std::cell::RefCell;
  use std::io::{Read, Write};
  use std::net::TcpListener;
  use std::rc::Rc;

  /// What the link told the loop.
  #[derive(Debug, PartialEq)]
  enum Told {
    Poll(bool),
    KeepAlive(bool),
    Arm(Duration),
    Disarm,
    Close,
  }

  struct Fake(Rc<RefCell<Vec<Told>>>);

  impl Watcher for Fake {
    fn poll(&mut self, writable: bool) {
      self.0.borrow_mut().push(Told::Poll(writable));
    }
    fn keep_alive(&mut self, alive: bool) {
      self.0.borrow_mut().push(Told::KeepAlive(alive));
    }
    fn arm(&mut self, after: Duration) {
      self.0.borrow_mut().push(Told::Arm(after));
    }
    fn disarm(&mut self) {
      self.0.borrow_mut().push(Told::Disarm);
    }
    fn close(self) {
      self.0.borrow_mut().push(Told::Close);
    }
  }

  const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

  fn backend() -> Arc<RedisBackend> {
    let target = parse_target("redis://127.0.0.1:6379", false).unwrap();
    Arc::new(RedisBackend::new(
      target,
      RedisOptions::with_timeout(Duration::from_secs(1)),
    ))
  }

  fn filled(result: crate::error::Result<TcpStream>) -> Slot {
    Arc::new(Mutex::new(Some(result)))
  }

  /// A link up over a loopback socket; the server's end and what the link tells the loop.
  fn up(now: Instant) -> (Link<u32, Fake>, TcpStream, Rc<RefCell<Vec<Told>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let told = Rc::new(RefCell::new(Vec::new()));
    let mut link = Link::new(backend());
    let mut client = Some(client);
    let fake = Fake(told.clone());
    let mut fake = Some(fake);
    assert!(!link.writable(now, |_| filled(Ok(client.take().unwrap())), |_| None));
    assert!(link.writable(now, |_| unreachable!(), |_| fake.take()));
    (link, server, told)
  }

  fn ids(settled: &Settled<u32>) -> Vec<u32> {
    settled.iter().map(|(id, _)| *id).collect()
  }

  #[test]
  fn replies_settle_calls_in_the_order_they_were_sent() {
    let t0 = Instant::now();
    let (mut link, mut server, told) = up(t0);
    for id in 0..3 {
      assert!(link.send(PING, id, t0).is_empty());
    }
    // Busy: the loop is kept alive and the oldest call's timeout armed, once.
    assert_eq!(
      *told.borrow(),
      [
        Told::KeepAlive(true),
        Told::Arm(Duration::from_millis(1001))
      ]
    );
    let mut asked = vec![0u8; PING.len() * 3];
    server.read_exact(&mut asked).unwrap();
    server.write_all(b"+PONG\r\n:7\r\n$1\r\nx\r\n").unwrap();
    let mut settled = Vec::new();
    while settled.len() < 3 {
      settled.extend(link.polled(None, true, false, t0));
    }
    assert_eq!(ids(&settled), [0, 1, 2]);
    assert!(matches!(
      &settled[1].1,
      Outcome::Reply(Ok(redis::Value::Int(7)))
    ));
    // Idle again: the timer stops and the loop may exit.
    assert_eq!(told.borrow()[2..], [Told::Disarm, Told::KeepAlive(false)]);
    assert!(link.writable(t0, |_| unreachable!(), |_| unreachable!()));
  }

  #[test]
  fn a_timeout_fails_every_call_in_flight_and_drops_the_connection() {
    let t0 = Instant::now();
    let (mut link, _server, told) = up(t0);
    assert!(link.send(PING, 0, t0).is_empty());
    assert!(link
      .send(PING, 1, t0 + Duration::from_millis(500))
      .is_empty());
    // Early (the oldest's deadline not reached): nothing fails, the timer is armed again.
    assert!(link.timer_fired(t0 + Duration::from_millis(999)).is_empty());
    assert_eq!(
      told.borrow().last(),
      Some(&Told::Arm(Duration::from_millis(2)))
    );
    let settled = link.timer_fired(t0 + Duration::from_millis(1001));
    assert_eq!(ids(&settled), [0, 1]);
    for (_, outcome) in &settled {
      let Outcome::TimedOut(err) = outcome else {
        panic!("not a timeout")
      };
      assert_eq!(err.to_string(), link.backend().timeout_error().to_string());
    }
    assert_eq!(told.borrow().last(), Some(&Told::Close));
    // The next call connects again.
    let mut connects = 0;
    let later = t0 + Duration::from_millis(1001);
    link.writable(
      later,
      |_| {
        connects += 1;
        Arc::new(Mutex::new(None))
      },
      |_| None,
    );
    assert_eq!(connects, 1);
  }

  #[test]
  fn a_failed_connect_is_tried_again_a_second_later_not_sooner() {
    let t0 = Instant::now();
    let mut link: Link<u32, Fake> = Link::new(backend());
    let connects = std::cell::Cell::new(0);
    let failing = |_: &Arc<RedisBackend>| {
      connects.set(connects.get() + 1);
      filled(Err(QuotaError::Unavailable("refused".into())))
    };
    assert!(!link.writable(t0, failing, |_| None));
    // The connect's failure is taken: idle until a second from now.
    assert!(!link.writable(t0, failing, |_| None));
    let early = t0 + RECONNECT - Duration::from_millis(1);
    assert!(!link.writable(early, failing, |_| None));
    assert_eq!(connects.get(), 1);
    assert!(!link.writable(t0 + RECONNECT, failing, |_| None));
    assert_eq!(connects.get(), 2);
  }

  #[test]
  fn calls_in_flight_on_the_shared_connection_hold_the_direct_one() {
    let t0 = Instant::now();
    let (mut link, _server, _) = up(t0);
    link.shared(true);
    link.shared(true);
    link.shared(false);
    assert!(!link.writable(t0, |_| unreachable!(), |_| unreachable!()));
    link.shared(false);
    link.shared(false);
    assert!(link.writable(t0, |_| unreachable!(), |_| unreachable!()));
  }

  #[test]
  fn a_lost_connection_settles_what_was_in_flight_after_closing() {
    let t0 = Instant::now();
    let (mut link, mut server, told) = up(t0);
    assert!(link.send(PING, 0, t0).is_empty());
    assert!(link.send(PING, 1, t0).is_empty());
    let mut asked = vec![0u8; PING.len() * 2];
    server.read_exact(&mut asked).unwrap();
    // One reply, then the server goes.
    server.write_all(b"+PONG\r\n").unwrap();
    drop(server);
    let mut settled = Vec::new();
    while !settled.iter().any(|(_, o)| matches!(o, Outcome::Lost(_))) {
      settled.extend(link.polled(None, true, false, t0));
    }
    assert_eq!(ids(&settled), [0, 1]);
    assert!(matches!(settled[0].1, Outcome::Reply(Ok(_))));
    assert_eq!(told.borrow().last(), Some(&Told::Close));
    // Closed before the settlements are handed back: nothing finds it up.
    let mut connects = 0;
    link.writable(
      t0,
      |_| {
        connects += 1;
        Arc::new(Mutex::new(None))
      },
      |_| None,
    );
    assert_eq!(connects, 1);
  }
}
