//! The direct connection (docs/redis.md#the-direct-connection): one plain-TCP connection to
//! a single Redis server owned by one JavaScript thread, whose socket that thread's own
//! event loop watches — so a command is written and its reply read on the thread that
//! asked, with no hand-off to the I/O runtime and back. This file is the wire: the
//! non-blocking socket, the bytes waiting to be written, the replies' framing and the
//! first-in first-out queue of calls waiting for them (many in flight: pipelined). The
//! link's state machine over it is `link.rs`, the event loop that watches the socket
//! `uv.rs`; what a reply settles is the caller's.
//! Connecting (TCP, AUTH, SELECT) happens on the I/O runtime ([`connect`]); the socket
//! is then handed over.

use super::connection::RedisBackend;
use crate::error::QuotaError;
use redis::{ConnectionAddr, RedisError, RedisResult, Value};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// How a queued call ended.
pub enum Outcome {
  /// Redis answered (a server error included).
  Reply(RedisResult<Value>),
  /// The connection was lost before the reply came: what the call would get from the
  /// shared connection.
  Lost(QuotaError),
  /// No answer within the timeout (the connection is dropped): the timeout's error.
  TimedOut(QuotaError),
}

struct Waiting<C> {
  done: C,
  deadline: Instant,
}

/// One direct connection: the socket, what is left to write, what was read but not yet
/// framed, and the calls waiting for their replies in the order they were sent.
pub struct Wire<C> {
  stream: TcpStream,
  output: Vec<u8>,
  input: Vec<u8>,
  framer: Framer,
  waiting: VecDeque<Waiting<C>>,
}

/// Finds where replies end in a growing buffer, resuming where it stopped (a large reply
/// arriving in many reads is scanned once): RESP2 and RESP3 types.
#[derive(Default)]
pub struct Framer {
  /// Where scanning resumes, from the start of the reply.
  pos: usize,
  /// Per open aggregate (array, set, map, push, attribute): the elements it still needs.
  open: Vec<i64>,
}

impl Framer {
  /// The length of the first reply in `buf` once it is complete (the framer then starts
  /// afresh for the next one), else `None` — call again with `buf` grown.
  pub fn next(&mut self, buf: &[u8]) -> Option<usize> {
    fn line(buf: &[u8], from: usize) -> Option<usize> {
      buf
        .get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p + 2)
    }
    fn number(buf: &[u8], from: usize, end: usize) -> Option<i64> {
      std::str::from_utf8(&buf[from..end - 2]).ok()?.parse().ok()
    }
    loop {
      let at = self.pos;
      let kind = *buf.get(at)?;
      let end = line(buf, at + 1)?;
      let done = match kind {
        b'$' | b'!' | b'=' => {
          let len = number(buf, at + 1, end)?;
          if len < 0 {
            end
          } else {
            let stop = end + len as usize + 2;
            if buf.len() < stop {
              return None;
            }
            stop
          }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
          let count = number(buf, at + 1, end)?.max(0);
          let items = match kind {
            b'%' => count * 2,
            // An attribute precedes the value it describes.
            b'|' => count * 2 + 1,
            _ => count,
          };
          self.pos = end;
          if items > 0 {
            self.open.push(items);
            continue;
          }
          end
        }
        _ => end,
      };
      self.pos = done;
      // One element complete: so are the aggregates it completes.
      loop {
        match self.open.last_mut() {
          None => {
            let len = std::mem::take(&mut self.pos);
            return Some(len);
          }
          Some(left) => {
            *left -= 1;
            if *left > 0 {
              break;
            }
            self.open.pop();
          }
        }
      }
    }
  }
}

/// The length of the first complete RESP value in `buf`, or `None` while it is incomplete.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
  Framer::default().next(buf)
}

impl<C> Wire<C> {
  /// A wire over `stream`, a connected socket (made non-blocking here).
  pub fn new(stream: TcpStream) -> io::Result<Self> {
    stream.set_nonblocking(true)?;
    stream.set_nodelay(true)?;
    Ok(Wire {
      stream,
      output: Vec::new(),
      input: Vec::with_capacity(4096),
      framer: Framer::default(),
      waiting: VecDeque::new(),
    })
  }

  /// The socket's descriptor, for the event loop to watch.
  #[cfg(unix)]
  pub fn fd(&self) -> i32 {
    std::os::fd::AsRawFd::as_raw_fd(&self.stream)
  }

  /// How many calls wait for a reply.
  pub fn in_flight(&self) -> usize {
    self.waiting.len()
  }

  /// Whether bytes are left to write (the loop should watch for writability).
  pub fn wants_write(&self) -> bool {
    !self.output.is_empty()
  }

  /// The deadline of the oldest call waiting.
  pub fn next_deadline(&self) -> Option<Instant> {
    self.waiting.front().map(|w| w.deadline)
  }

  /// Queues `done` for the reply to `command` (packed), due by `deadline`, written at once
  /// as far as the socket takes it. An error: the connection is unusable (`done` is queued
  /// all the same, and settled with the others when the caller closes it).
  pub fn send(&mut self, command: &[u8], done: C, deadline: Instant) -> io::Result<()> {
    self.waiting.push_back(Waiting { done, deadline });
    if self.output.is_empty() {
      let written = write_some(&mut self.stream, command)?;
      self.output.extend_from_slice(&command[written..]);
    } else {
      self.output.extend_from_slice(command);
    }
    Ok(())
  }

  /// Writes what is left, as far as the socket takes it.
  pub fn writable(&mut self) -> io::Result<()> {
    let written = write_some(&mut self.stream, &self.output)?;
    self.output.drain(..written);
    Ok(())
  }

  /// Reads what arrived and pairs each complete reply with its call, in order. An error:
  /// the connection is lost (what was paired before it is returned first, in `settled`).
  pub fn readable(&mut self, settled: &mut Vec<(C, Outcome)>) -> io::Result<()> {
    let mut chunk = [0u8; 16 * 1024];
    let result = loop {
      match self.stream.read(&mut chunk) {
        Ok(0) => {
          break Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "connection closed by server",
          ))
        }
        Ok(n) => self.input.extend_from_slice(&chunk[..n]),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
        Err(e) => break Err(e),
      }
    };
    let mut start = 0;
    while let Some(len) = self.framer.next(&self.input[start..]) {
      let frame = &self.input[start..start + len];
      start += len;
      let Some(waiting) = self.waiting.pop_front() else {
        // A reply nobody asked for (never sent by a RESP2 server): out of step.
        return Err(io::Error::new(
          io::ErrorKind::InvalidData,
          "unexpected reply",
        ));
      };
      let reply = redis::parse_redis_value(frame).and_then(|v| v.extract_error());
      settled.push((waiting.done, Outcome::Reply(reply)));
    }
    self.input.drain(..start);
    result
  }

  /// Every call still waiting, in order (the connection is being closed).
  pub fn drain(&mut self) -> impl Iterator<Item = C> + '_ {
    self.waiting.drain(..).map(|w| w.done)
  }
}

fn write_some(stream: &mut TcpStream, bytes: &[u8]) -> io::Result<usize> {
  let mut written = 0;
  while written < bytes.len() {
    match stream.write(&bytes[written..]) {
      Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
      Ok(n) => written += n,
      Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
      Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
      Err(e) => return Err(e),
    }
  }
  Ok(written)
}

/// The direct connections' `CLIENT SETNAME`.
pub const CLIENT_NAME: &str = "quota-engine-direct";

/// Whether `backend` can have direct connections: one server over plain TCP (`redis://`)
/// speaking RESP2 (the direct connection sends no HELLO; TLS, Unix sockets, `protocol=resp3`,
/// clusters and Sentinels keep the shared connection).
pub fn supported(backend: &RedisBackend) -> bool {
  !backend.tls()
    && backend.single_info().is_some_and(|info| {
      matches!(info.addr(), ConnectionAddr::Tcp(..))
        && info.redis_settings().protocol() == redis::ProtocolVersion::RESP2
    })
}

/// Connects to `backend`'s server and says who we are (AUTH, SELECT, CLIENT SETNAME), within
/// the timeout;
/// the socket, blocking mode unset by the caller's [`Wire::new`].
pub async fn connect(backend: &RedisBackend) -> crate::error::Result<TcpStream> {
  let Some(info) = backend.single_info() else {
    return Err(QuotaError::Store("not a single server".into()));
  };
  let ConnectionAddr::Tcp(host, port) = info.addr() else {
    return Err(QuotaError::Store("not a TCP address".into()));
  };
  let settings = info.redis_settings();
  let mut hello = Vec::new();
  let mut replies = 0;
  if let Some(password) = settings.password() {
    let mut auth = redis::cmd("AUTH");
    if let Some(user) = settings.username() {
      auth.arg(user);
    }
    auth.arg(password);
    auth.write_packed_command(&mut hello);
    replies += 1;
  }
  if settings.db() != 0 {
    redis::cmd("SELECT")
      .arg(settings.db())
      .write_packed_command(&mut hello);
    replies += 1;
  }
  // Named, so `CLIENT LIST` tells it apart; a server that refuses the name still serves.
  redis::cmd("CLIENT")
    .arg("SETNAME")
    .arg(CLIENT_NAME)
    .write_packed_command(&mut hello);
  replies += 1;
  let address = format!("{host}:{port}");
  let attempt = async {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(&address).await?;
    {
      stream.write_all(&hello).await?;
      let mut input = Vec::new();
      let mut chunk = [0u8; 1024];
      let mut start = 0;
      let mut seen = 0;
      while seen < replies {
        match frame_len(&input[start..]) {
          Some(len) => {
            let reply = redis::parse_redis_value(&input[start..start + len])?.extract_error();
            start += len;
            seen += 1;
            // AUTH and SELECT must succeed; the name (the last) need not.
            if seen < replies {
              reply?;
            }
          }
          None => {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
              return Err(RedisError::from(io::Error::from(
                io::ErrorKind::ConnectionReset,
              )));
            }
            input.extend_from_slice(&chunk[..n]);
          }
        }
      }
    }
    Ok::<_, RedisError>(stream.into_std()?)
  };
  match tokio::time::timeout(backend.timeout(), attempt).await {
    Ok(Ok(stream)) => Ok(stream),
    Ok(Err(err)) => Err(backend.classify(&err)),
    Err(_) => Err(backend.timeout_error()),
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::time::Duration;

  #[test]
  fn replies_are_framed_whole_or_not_at_all() {
    for whole in [
      &b"+PONG\r\n"[..],
      b"-ERR nope\r\n",
      b":42\r\n",
      b"$5\r\nhello\r\n",
      b"$-1\r\n",
      b"*-1\r\n",
      b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
      b"%1\r\n+k\r\n+v\r\n",
      b"$4\r\na\r\nb\r\n",
    ] {
      assert_eq!(frame_len(whole), Some(whole.len()), "{whole:?}");
      let mut two = whole.to_vec();
      two.extend_from_slice(whole);
      assert_eq!(frame_len(&two), Some(whole.len()));
      for cut in 0..whole.len() {
        assert_eq!(frame_len(&whole[..cut]), None, "{whole:?} cut at {cut}");
      }
      // Fed a byte at a time to one framer: the same end, found once.
      let mut framer = Framer::default();
      let first = (1..=two.len()).find_map(|n| framer.next(&two[..n]).map(|len| (n, len)));
      assert_eq!(
        first,
        Some((whole.len(), whole.len())),
        "{whole:?} fed bytewise"
      );
      assert_eq!(
        framer.next(&two[whole.len()..]),
        Some(whole.len()),
        "then the next"
      );
    }
  }

  #[test]
  fn only_a_plain_resp2_single_server_has_direct_connections() {
    use crate::store::redis::{parse_target, RedisOptions};
    let supports = |url: &str| {
      let target = parse_target(url, false).unwrap();
      supported(&RedisBackend::new(
        target,
        RedisOptions::with_timeout(Duration::from_secs(1)),
      ))
    };
    assert!(supports("redis://127.0.0.1:6379"));
    assert!(supports("redis://user:pw@127.0.0.1:6379/2"));
    assert!(!supports("rediss://127.0.0.1:6379"));
    assert!(!supports("redis://127.0.0.1:6379?protocol=resp3"));
    assert!(!supports("redis+unix:///tmp/redis.sock"));
  }

  #[test]
  fn pipelined_replies_settle_their_calls_in_order_and_a_close_is_a_loss() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let mut wire: Wire<u32> = Wire::new(client).unwrap();
    for id in 0..3 {
      wire
        .send(b"*1\r\n$4\r\nPING\r\n", id, Instant::now())
        .unwrap();
    }
    assert_eq!(wire.in_flight(), 3);
    let mut asked = vec![0u8; 14 * 3];
    server.read_exact(&mut asked).unwrap();
    // Two replies and half of the third.
    server.write_all(b"+PONG\r\n:7\r\n$3\r\nab").unwrap();
    let mut settled = Vec::new();
    while settled.len() < 2 {
      wire.readable(&mut settled).unwrap();
    }
    assert_eq!(
      settled.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
      [0, 1]
    );
    assert!(matches!(&settled[1].1, Outcome::Reply(Ok(Value::Int(7)))));
    drop(server);
    let mut rest = Vec::new();
    let lost = loop {
      match wire.readable(&mut rest) {
        Ok(()) => std::thread::sleep(Duration::from_millis(1)),
        Err(e) => break e,
      }
    };
    assert_eq!(lost.kind(), io::ErrorKind::ConnectionReset);
    assert!(rest.is_empty());
    assert_eq!(wire.drain().collect::<Vec<_>>(), [2]);
  }
}
