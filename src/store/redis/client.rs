//! The ioredis-like client's raw commands (`getRedisClient()`, docs/redis.md): one command
//! on the URL's shared connection, its reply as JSON-like values for JavaScript.

use super::{RedisBackend, Retry};
use crate::error::Result;

fn retry_of(args: &[String]) -> Retry {
  match args.first().map(|c| c.to_ascii_uppercase()).as_deref() {
    Some("GET" | "MGET" | "PING" | "TTL" | "PTTL" | "EXISTS" | "SMEMBERS") => Retry::Read,
    _ => Retry::Write,
  }
}

/// The commands that change the state of the connection they are sent on (its database,
/// a transaction, its user, its replies) or hold it (a blocking wait).
const REFUSED: [&str; 21] = [
  "SELECT",
  "MULTI",
  "EXEC",
  "DISCARD",
  "WATCH",
  "UNWATCH",
  "MONITOR",
  "HELLO",
  "AUTH",
  "RESET",
  "QUIT",
  "BLPOP",
  "BRPOP",
  "BRPOPLPUSH",
  "BLMOVE",
  "BLMPOP",
  "BZPOPMIN",
  "BZPOPMAX",
  "BZMPOP",
  "WAIT",
  "WAITAOF",
];

/// Whether `args` would change or hold the shared connection for every other call on it:
/// the [`REFUSED`] commands, the `SUBSCRIBE` family, `CLIENT REPLY`/`TRACKING` and `XREAD …
/// BLOCK`.
fn holds_the_connection(args: &[String]) -> bool {
  let word = |i: usize| args.get(i).map(|w| w.to_ascii_uppercase());
  let Some(name) = word(0) else {
    return false;
  };
  REFUSED.contains(&name.as_str())
    || name.ends_with("SUBSCRIBE")
    || (name == "CLIENT" && matches!(word(1).as_deref(), Some("REPLY" | "TRACKING")))
    || (name.starts_with("XREAD") && args.iter().any(|a| a.eq_ignore_ascii_case("BLOCK")))
}

/// Sends one command (`args[0]` is its name) within the timeout and answers its reply as
/// JSON. Reads are retried after a dropped connection; everything else only when refused.
/// A command that would change or hold the shared connection is refused.
pub async fn client_command(backend: &RedisBackend, args: &[String]) -> Result<serde_json::Value> {
  if holds_the_connection(args) {
    let message = format!(
      "{} would change or hold the connection every quota call shares; use a Redis client of your own",
      args[0]
    );
    return Err(crate::error::QuotaError::range_error("args[0]", message));
  }
  backend.command(args, retry_of(args)).await.map(reply_json)
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
