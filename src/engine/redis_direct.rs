//! What goes out on the calling thread's direct connection (docs/redis.md#the-direct-connection):
//! the ioredis-like client's commands and `peek`'s reads, each a [`DirectCall`] — the
//! command to send, the answer from its outcome, and the same call on the shared
//! connection when the direct one cannot take it. The edge sends it and settles its
//! promise with [`DirectCall::finish`]; which calls may go direct is decided here.

use super::{Engine, Step};
use crate::error::Result;
use crate::store::redis::client;
use crate::store::redis::direct::Outcome;
use crate::store::redis::RedisBackend;
use std::sync::Arc;

/// A call that may go out on the calling thread's direct connection.
pub trait DirectCall: 'static {
  type Value: Send + 'static;
  /// The backend to send it to.
  fn backend(&self) -> &Arc<RedisBackend>;
  /// The command, packed (taken once, to be sent).
  fn take_packed(&mut self) -> Vec<u8>;
  /// Its answer from what came back — or, when the shared connection must answer instead
  /// (a lost read, a missing script), the step there.
  fn finish(self, engine: &'static Engine, outcome: Outcome) -> Step<Result<Self::Value>>;
}

/// One raw command of the ioredis-like client, for the direct connection.
pub struct DirectCommand {
  backend: Arc<RedisBackend>,
  words: Vec<String>,
  packed: Vec<u8>,
}

impl Engine {
  /// The client's command `words` for the calling thread's direct connection, when it may
  /// take it (libuv found, `QUOTA_STORE_REDIS_DIRECT`, a plain single server, a command
  /// that answers once and leaves the connection as it was); else the arguments back.
  pub fn direct_command(
    &self,
    backend: Arc<RedisBackend>,
    words: Vec<String>,
  ) -> std::result::Result<DirectCommand, (Arc<RedisBackend>, Vec<String>)> {
    if crate::store::redis::uv::uv().is_none() || !self.redis_direct(&backend) {
      return Err((backend, words));
    }
    match client::direct_command(&backend, &words) {
      Some(packed) => Ok(DirectCommand {
        backend,
        words,
        packed,
      }),
      None => Err((backend, words)),
    }
  }
}

impl DirectCommand {
  /// The command and its backend, to send on the shared connection.
  pub fn into_parts(self) -> (Arc<RedisBackend>, Vec<String>) {
    (self.backend, self.words)
  }
}

/// The client's command on the shared connection.
pub async fn shared_command(
  backend: Arc<RedisBackend>,
  words: Vec<String>,
) -> Result<serde_json::Value> {
  client::client_command(&backend, &words).await
}

impl DirectCall for DirectCommand {
  type Value = serde_json::Value;

  fn backend(&self) -> &Arc<RedisBackend> {
    &self.backend
  }

  fn take_packed(&mut self) -> Vec<u8> {
    std::mem::take(&mut self.packed)
  }

  fn finish(self, _: &'static Engine, outcome: Outcome) -> Step<Result<serde_json::Value>> {
    match client::direct_reply(&self.backend, &self.words, outcome) {
      Some(answer) => Step::Now(answer),
      None => Step::Later(Box::pin(shared_command(self.backend, self.words))),
    }
  }
}
