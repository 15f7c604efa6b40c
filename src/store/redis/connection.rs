//! One multiplexed, auto-reconnecting connection per Redis URL, shared by the store, the
//! hot path and the ioredis-like client, with a bounded time for every operation.
//!
//! - One server: a [`ConnectionManager`] (one TCP connection, requests pipelined), created
//!   lazily — the first operation connects, and after the server went away the manager
//!   reconnects in the background; the operation that finds the connection dropped fails.
//! - A cluster: a [`ClusterConnection`] (one multiplexed connection per node, slots
//!   refreshed on MOVED), created on first use; an initial failure is retried by the next
//!   operation.
//! - Every operation runs under `QUOTA_STORE_REDIS_TIMEOUT_MS` (default 1000 ms): past it,
//!   the operation fails with [`QuotaError::Unavailable`] — never a hang. A connection
//!   refusal (nothing was sent) is retried once inside that time, so the first operation
//!   after a restarted server succeeds; a read is also retried once after a dropped
//!   connection (a write is not: it may have been applied).
//!
//! The connections live on the tokio runtime of the addon (napi's), whose threads never
//! keep Node's event loop alive.

use super::scripts::ScriptCall;
use super::target::{parse_target, RedisTarget};
use super::KeyLayout;
use crate::error::{QuotaError, Result};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, RedisError, RedisFuture, RedisResult, Value};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;

#[derive(Clone)]
enum Conn {
  Single(ConnectionManager),
  Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
  fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
    match self {
      Conn::Single(c) => c.req_packed_command(cmd),
      Conn::Cluster(c) => c.req_packed_command(cmd),
    }
  }

  fn req_packed_commands<'a>(
    &'a mut self,
    pipeline: &'a redis::Pipeline,
    offset: usize,
    count: usize,
  ) -> RedisFuture<'a, Vec<Value>> {
    match self {
      Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
      Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
    }
  }

  fn get_db(&self) -> i64 {
    match self {
      Conn::Single(c) => c.get_db(),
      Conn::Cluster(c) => c.get_db(),
    }
  }
}

type Attempt<'a, T> = Pin<Box<dyn Future<Output = RedisResult<T>> + Send + 'a>>;

/// Whether an operation may be sent again after a dropped connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
  /// A read: retried once after a refused or dropped connection.
  Read,
  /// A write: retried once only when the connection was refused (nothing was sent).
  Write,
}

/// The connection to one Redis URL.
pub struct RedisBackend {
  /// The URL as given (password included): the backend's name.
  url: String,
  target: RedisTarget,
  timeout: Duration,
  conn: OnceCell<Conn>,
}

impl std::fmt::Debug for RedisBackend {
  fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    f.debug_struct("RedisBackend")
      .field("url", &self.target.display)
      .field("timeout", &self.timeout)
      .finish_non_exhaustive()
  }
}

impl RedisBackend {
  /// A backend for `target`; nothing connects until the first operation.
  pub fn new(target: RedisTarget, timeout: Duration) -> Self {
    RedisBackend {
      url: String::new(),
      target,
      timeout,
      conn: OnceCell::new(),
    }
  }

  /// How keys are named on this server.
  pub fn layout(&self) -> KeyLayout {
    self.target.layout
  }

  /// The URL, password masked.
  /// The URL this backend was created for, as given (password included).
  pub fn url(&self) -> &str {
    &self.url
  }

  /// The URL with its password masked.
  pub fn display(&self) -> &str {
    &self.target.display
  }

  /// The bound on every operation.
  pub fn timeout(&self) -> Duration {
    self.timeout
  }

  async fn connection(&self) -> RedisResult<Conn> {
    self
      .conn
      .get_or_try_init(|| async {
        match self.target.layout {
          KeyLayout::Standalone => {
            let client = redis::Client::open(self.target.nodes[0].clone())?;
            let config = ConnectionManagerConfig::new()
              .set_connection_timeout(Some(self.timeout))
              .set_response_timeout(Some(self.timeout))
              .set_number_of_retries(2)
              .set_min_delay(Duration::from_millis(10))
              .set_max_delay(Duration::from_millis(200));
            Ok(Conn::Single(ConnectionManager::new_lazy_with_config(
              client, config,
            )?))
          }
          KeyLayout::Cluster => {
            let client = ClusterClientBuilder::new(self.target.nodes.clone())
              .connection_timeout(self.timeout)
              .response_timeout(self.timeout)
              .retries(2)
              .min_retry_wait(10)
              .max_retry_wait(200)
              .build()?;
            Ok(Conn::Cluster(client.get_async_connection().await?))
          }
        }
      })
      .await
      .cloned()
  }

  /// Runs `attempt` within the timeout, retrying once as `retry` allows.
  async fn execute<'a, T: Send + 'a>(
    &'a self,
    retry: Retry,
    attempt: impl Fn(Conn) -> Attempt<'a, T> + Send + Sync + 'a,
  ) -> Result<T> {
    let run = async {
      let mut retried = false;
      loop {
        let result = match self.connection().await {
          Ok(conn) => attempt(conn).await,
          Err(err) => Err(err),
        };
        match result {
          Err(err) if !retried && retryable(&err, retry) => retried = true,
          other => return other,
        }
      }
    };
    match tokio::time::timeout(self.timeout, run).await {
      Ok(Ok(value)) => Ok(value),
      Ok(Err(err)) => Err(self.classify(&err)),
      Err(_) => Err(QuotaError::Unavailable(format!(
        "Redis at {} did not answer within {} ms (connection down or server stalled)",
        self.target.display,
        self.timeout.as_millis()
      ))),
    }
  }

  fn classify(&self, err: &RedisError) -> QuotaError {
    if is_connection_failure(err) {
      QuotaError::Unavailable(format!(
        "cannot connect to Redis at {}: {err}",
        self.target.display
      ))
    } else {
      QuotaError::Store(format!("Redis at {}: {err}", self.target.display))
    }
  }

  /// Runs one of the engine's scripts (EVALSHA; SCRIPT LOAD and again on NOSCRIPT) and
  /// returns its array reply.
  pub async fn run_script(&self, call: &ScriptCall, retry: Retry) -> Result<Vec<Option<String>>> {
    let mut invocation = call.script.script().prepare_invoke();
    for key in &call.keys {
      invocation.key(key);
    }
    for arg in &call.args {
      invocation.arg(arg);
    }
    let invocation = &invocation;
    self
      .execute(retry, move |mut conn| {
        Box::pin(async move { invocation.invoke_async(&mut conn).await })
      })
      .await
  }

  /// Sends one command (`args[0]` is its name) and returns the raw reply.
  pub async fn command(&self, args: &[String], retry: Retry) -> Result<Value> {
    let Some((name, rest)) = args.split_first() else {
      return Err(QuotaError::type_error("args", "expected a command name"));
    };
    let mut cmd = redis::cmd(name);
    for arg in rest {
      cmd.arg(arg);
    }
    let cmd = &cmd;
    self
      .execute(retry, move |mut conn| {
        Box::pin(async move { cmd.query_async::<Value>(&mut conn).await })
      })
      .await
  }
}

fn is_connection_failure(err: &RedisError) -> bool {
  err.is_io_error()
    || err.is_connection_refusal()
    || err.is_connection_dropped()
    || err.is_timeout()
    || err.is_cluster_error()
    || matches!(
      err.kind(),
      redis::ErrorKind::ClusterConnectionNotFound | redis::ErrorKind::Io
    )
}

fn retryable(err: &RedisError, retry: Retry) -> bool {
  err.is_connection_refusal() || (retry == Retry::Read && is_connection_failure(err))
}

static BACKENDS: Mutex<Option<HashMap<String, Arc<RedisBackend>>>> = Mutex::new(None);

/// The backend of `url` (one per URL string, created on first use with `cluster` and
/// `timeout`, which the engine's configuration gives). Invalid URLs are a `RangeError`
/// naming `url`.
pub fn backend(url: &str, cluster: bool, timeout: Duration) -> Result<Arc<RedisBackend>> {
  let mut guard = BACKENDS.lock().unwrap_or_else(|e| e.into_inner());
  let map = guard.get_or_insert_with(HashMap::new);
  if let Some(found) = map.get(url) {
    return Ok(found.clone());
  }
  let target = parse_target(url, cluster)?;
  let mut created = RedisBackend::new(target, timeout);
  created.url = url.to_string();
  let created = Arc::new(created);
  map.insert(url.to_string(), created.clone());
  Ok(created)
}

/// Forgets the backend of `url` (every backend with `None`): its connection closes once
/// the operations in flight on it have finished; the next use connects anew.
pub fn forget_backend(url: Option<&str>) {
  let mut guard = BACKENDS.lock().unwrap_or_else(|e| e.into_inner());
  if let Some(map) = guard.as_mut() {
    match url {
      Some(url) => {
        map.remove(url);
      }
      None => map.clear(),
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn one_backend_per_url_until_forgotten() {
    let url = "redis://127.0.0.1:1/15";
    let timeout = Duration::from_millis(1000);
    let a = backend(url, false, timeout).unwrap();
    let b = backend(url, false, timeout).unwrap();
    assert_eq!(a.url(), url);
    assert!(Arc::ptr_eq(&a, &b));
    forget_backend(Some(url));
    let c = backend(url, false, timeout).unwrap();
    assert!(!Arc::ptr_eq(&a, &c));
    assert!(backend("nope", false, timeout).is_err());
  }

  #[test]
  fn an_unreachable_server_fails_fast_with_a_connection_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
      .enable_all()
      .build()
      .unwrap();
    let target = parse_target("redis://:pw@127.0.0.1:1", false).unwrap();
    let backend = RedisBackend::new(target, Duration::from_millis(300));
    let started = std::time::Instant::now();
    let err = rt
      .block_on(backend.command(&["PING".to_string()], Retry::Read))
      .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(err.code(), "ERR_QUOTA_REDIS_UNAVAILABLE", "{err}");
    let text = err.to_string();
    assert!(
      text.contains("127.0.0.1:1") && !text.contains("pw@"),
      "{text}"
    );
  }
}
