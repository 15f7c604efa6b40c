//! The ioredis-like client's raw commands (`getRedisClient()`, docs/redis.md): one command
//! on the URL's shared connection, its reply as JSON-like values for JavaScript.

use super::connection::raw_written;
use super::direct::Outcome;
use super::{RedisBackend, Retry};
use crate::error::Result;

fn retry_of(args: &[String]) -> Retry {
  match args.first().map(|c| c.to_ascii_uppercase()).as_deref() {
    Some("GET" | "MGET" | "PING" | "TTL" | "PTTL" | "EXISTS" | "SMEMBERS") => Retry::Read,
    _ => Retry::Write,
  }
}

/// Sends one command (`args[0]` is its name) within the timeout and answers its reply as
/// JSON. Reads are retried after a dropped connection; everything else only when refused.
pub async fn client_command(backend: &RedisBackend, args: &[String]) -> Result<serde_json::Value> {
  backend.command(args, retry_of(args)).await.map(reply_json)
}

/// One command for the direct connection (docs/redis.md#the-direct-connection): packed, the
/// counter view told first as [`RedisBackend::command`] does; `None` for no name.
pub fn direct_command(backend: &RedisBackend, args: &[String]) -> Option<Vec<u8>> {
  let (name, rest) = args.split_first()?;
  if !one_reply_same_state(args) {
    return None;
  }
  raw_written(backend, args, retry_of(args));
  let mut cmd = redis::cmd(name);
  for arg in rest {
    cmd.arg(arg);
  }
  Some(cmd.get_packed_command())
}

/// Whether a command answers exactly once and leaves the connection as it found it: the
/// direct connection pairs replies with calls in order, and the engine's own reads share
/// it. Subscriptions, `MONITOR`, `CLIENT REPLY` / `TRACKING` / `SETNAME`, `SELECT`,
/// `HELLO`, `AUTH`, `RESET`, transactions and replication commands go on the shared
/// connection, as before.
fn one_reply_same_state(args: &[String]) -> bool {
  const SHARED_ONLY: [&str; 19] = [
    "SUBSCRIBE",
    "PSUBSCRIBE",
    "SSUBSCRIBE",
    "UNSUBSCRIBE",
    "PUNSUBSCRIBE",
    "SUNSUBSCRIBE",
    "MONITOR",
    "HELLO",
    "SELECT",
    "AUTH",
    "RESET",
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "QUIT",
    "SYNC",
    "PSYNC",
  ];
  const CLIENT_SHARED_ONLY: [&str; 3] = ["REPLY", "TRACKING", "SETNAME"];
  let is = |word: Option<&String>, names: &[&str]| {
    word.is_some_and(|w| names.iter().any(|n| n.eq_ignore_ascii_case(w)))
  };
  let name = args.first();
  if is(name, &["CLIENT"]) {
    return !is(args.get(1), &CLIENT_SHARED_ONLY);
  }
  !is(name, &SHARED_ONLY)
}

/// The answer to a command sent on the direct connection, as [`client_command`] gives it —
/// or `None`: send it again on the shared connection (a read whose connection was lost,
/// retried once there as it would be).
pub fn direct_reply(
  backend: &RedisBackend,
  args: &[String],
  outcome: Outcome,
) -> Option<Result<serde_json::Value>> {
  let retry = retry_of(args);
  raw_written(backend, args, retry);
  match outcome {
    Outcome::Reply(Ok(value)) => Some(Ok(reply_json(value))),
    Outcome::Reply(Err(err)) => Some(Err(backend.classify(&err))),
    Outcome::Lost(_) if retry == Retry::Read => None,
    Outcome::Lost(err) | Outcome::TimedOut(err) => Some(Err(err)),
  }
}

/// A Redis reply as JSON-like JS: nil → `null`, integers and doubles → numbers, bulk and
/// status strings → strings, arrays, sets and pushes → arrays, maps → `[key, value]` pairs,
/// a server error inside an array → its message.
fn reply_json(value: redis::Value) -> serde_json::Value {
  use redis::Value as V;
  use serde_json::Value as J;
  match value {
    V::Nil => J::Null,
    V::Int(n) => J::from(n),
    V::Double(n) => serde_json::Number::from_f64(n).map_or(J::Null, J::Number),
    V::Boolean(b) => J::Bool(b),
    V::BulkString(bytes) => J::String(String::from_utf8_lossy(&bytes).into_owned()),
    V::SimpleString(s) => J::String(s),
    V::Okay => J::String("OK".into()),
    V::VerbatimString { text, .. } => J::String(text),
    V::BigNumber(n) => J::String(String::from_utf8_lossy(&n).into_owned()),
    V::Array(items) | V::Set(items) | V::Push { data: items, .. } => {
      J::Array(items.into_iter().map(reply_json).collect())
    }
    V::Map(pairs) => J::Array(
      pairs
        .into_iter()
        .map(|(k, v)| J::Array(vec![reply_json(k), reply_json(v)]))
        .collect(),
    ),
    V::Attribute { data, .. } => reply_json(*data),
    V::ServerError(err) => J::String(format!("{err:?}")),
    _ => J::Null,
  }
}

#[cfg(test)]
mod tests {
  use super::one_reply_same_state;

  fn words(line: &str) -> Vec<String> {
    line.split(' ').map(String::from).collect()
  }

  #[test]
  fn commands_that_do_not_answer_once_or_change_the_connection_stay_shared() {
    for shared in [
      "SUBSCRIBE a b",
      "monitor",
      "CLIENT REPLY OFF",
      "client setname x",
      "SELECT 1",
      "HELLO 3",
      "MULTI",
      "exec",
      "QUIT",
    ] {
      assert!(!one_reply_same_state(&words(shared)), "{shared}");
    }
    for direct in [
      "GET k",
      "PING",
      "CLIENT INFO",
      "CLIENT PAUSE 10",
      "EVALSHA x 0",
      "mget a b",
    ] {
      assert!(one_reply_same_state(&words(direct)), "{direct}");
    }
  }
}
