//! One multiplexed, auto-reconnecting connection per Redis URL, shared by the store, the
//! hot path and the ioredis-like client, with a bounded time for every operation
//! (docs/redis.md#timeouts-and-faults).
//!
//! - One server: a lazily made [`ConnectionManager`], which reconnects in the background
//!   after the server went away (the operation that finds the connection dropped fails).
//! - A cluster: a [`ClusterConnection`] (one connection per node, slots refreshed on
//!   MOVED), made on first use; an initial failure is retried by the next operation.
//! - A Sentinel-managed primary: one connection to the primary the Sentinels name, dropped
//!   on a connection failure or a `READONLY` reply so the next attempt asks them again
//!   (docs/redis.md#sentinel).
//! - `rediss`: TLS (rustls) to every node, with `tls.rs`'s roots and client identity.
//! - Past `QUOTA_STORE_REDIS_TIMEOUT_MS` an operation fails with
//!   [`QuotaError::Unavailable`] — never a hang. A refused connection (nothing was sent) is
//!   retried once within that time, so the first operation after a restart succeeds; a
//!   read is also retried after a dropped connection (a write is not: it may have been
//!   applied).
//!
//! The connections live on the addon's tokio runtime, whose threads never keep Node's
//! event loop alive.

use super::scripts::{ReadBatch, ScriptCall, ScriptName};
use super::target::{parse_target, RedisTarget, SentinelTarget, Topology};
use super::tls::{certificates, TlsFiles};
use super::view::CounterView;
use super::KeyLayout;
use crate::error::{QuotaError, Result};
use redis::aio::{
  ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
  AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ProtocolVersion, RedisError, RedisFuture,
  RedisResult, TlsMode, Value,
};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;

#[derive(Clone)]
enum Conn {
  /// The single server's manager, and its generation (bumped per new manager).
  Single(ConnectionManager, u64),
  Cluster(ClusterConnection),
  /// The primary a Sentinel named, and the generation of that answer.
  Primary(MultiplexedConnection, u64),
}

impl ConnectionLike for Conn {
  fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
    match self {
      Conn::Single(c, _) => c.req_packed_command(cmd),
      Conn::Cluster(c) => c.req_packed_command(cmd),
      Conn::Primary(c, _) => c.req_packed_command(cmd),
    }
  }

  fn req_packed_commands<'a>(
    &'a mut self,
    pipeline: &'a redis::Pipeline,
    offset: usize,
    count: usize,
  ) -> RedisFuture<'a, Vec<Value>> {
    match self {
      Conn::Single(c, _) => c.req_packed_commands(pipeline, offset, count),
      Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
      Conn::Primary(c, _) => c.req_packed_commands(pipeline, offset, count),
    }
  }

  fn get_db(&self) -> i64 {
    match self {
      Conn::Single(c, _) => c.get_db(),
      Conn::Cluster(c) => c.get_db(),
      Conn::Primary(c, _) => c.get_db(),
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

/// How a backend connects, from the engine's configuration (docs/contract.md §11).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RedisOptions {
  /// `QUOTA_STORE_REDIS_CLUSTER`.
  pub cluster: bool,
  /// `QUOTA_STORE_REDIS_TIMEOUT_MS`.
  pub timeout: Duration,
  /// The CA and client certificate files of a `rediss` URL.
  pub tls: TlsFiles,
  /// `QUOTA_STORE_REDIS_POOL_TOTALS`.
  pub totals: super::PoolTotals,
}

/// The Sentinels of a backend and the primary they last named.
struct Sentinels {
  client: tokio::sync::Mutex<SentinelClient>,
  /// The connection to the primary, and its generation (bumped per new answer).
  primary: Mutex<(Option<MultiplexedConnection>, u64)>,
}

/// The connection to one Redis URL.
pub struct RedisBackend {
  /// The URL as given (password included): the backend's name.
  url: String,
  target: RedisTarget,
  options: RedisOptions,
  /// A single server's connection manager, and its generation.
  single: Mutex<(Option<ConnectionManager>, u64)>,
  cluster: OnceCell<ClusterConnection>,
  sentinels: OnceCell<Sentinels>,
  /// The hot path's counter view (docs/redis.md#the-counter-view).
  view: Arc<CounterView>,
  /// Whether a call through this URL has succeeded: then a failure is not its scheme's.
  answered: AtomicBool,
}

impl Drop for RedisBackend {
  fn drop(&mut self) {
    // The tracking connection, if any, ends with the backend.
    self.view.close();
  }
}

impl RedisBackend {
  /// A backend for `url`, parsed as `target`; nothing connects until the first operation.
  pub fn new(url: &str, target: RedisTarget, options: RedisOptions) -> Self {
    RedisBackend {
      url: url.to_string(),
      target,
      options,
      single: Mutex::new((None, 0)),
      cluster: OnceCell::new(),
      sentinels: OnceCell::new(),
      view: Arc::default(),
      answered: AtomicBool::new(false),
    }
  }

  /// The counter view of this URL (docs/redis.md#the-counter-view).
  pub fn view(&self) -> &Arc<CounterView> {
    &self.view
  }

  /// Whether a counter view can be kept: one server (a cluster's or a Sentinel primary's
  /// invalidations would need a tracking connection per node, followed across failovers).
  pub fn supports_view(&self) -> bool {
    matches!(self.target.topology, Topology::Single(_))
  }

  /// A RESP3 client of the server, for the counter view's tracking connection (one
  /// server only, see [`Self::supports_view`]).
  pub(crate) fn resp3_client(&self) -> RedisResult<Client> {
    let Topology::Single(info) = &self.target.topology else {
      let why = "no counter view off a single server";
      return Err(RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        why,
      )));
    };
    let settings = info
      .redis_settings()
      .clone()
      .set_protocol(ProtocolVersion::RESP3);
    self.client_of(&info.clone().set_redis_settings(settings))
  }

  /// What `call`, a write about to be sent or just answered, changes in the view: the
  /// counters it names (`write.lua`, `flush.lua`), or — the scripts whose keys do not
  /// name every counter they change — everything. Called on both sides of the write, so
  /// no read of this process is answered from before it once it is sent.
  pub fn invalidate_written(&self, call: &ScriptCall) {
    if !self.view.is_up() {
      return;
    }
    match call.script {
      ScriptName::Read => {}
      ScriptName::Write | ScriptName::Flush => {
        for key in &call.keys {
          self.view.invalidate_key(key);
        }
      }
      ScriptName::Reserve | ScriptName::Settle | ScriptName::Clear => self.view.reset(),
    }
  }

  /// How pool totals are read (docs/redis.md#pool-totals).
  pub fn totals(&self) -> super::PoolTotals {
    self.options.totals
  }

  /// An empty read of this server's counters whose pool totals sum `ids` (see
  /// [`ReadBatch::new`]).
  pub fn batch(&self, ids: impl IntoIterator<Item = String>) -> ReadBatch {
    ReadBatch::new(self.layout(), self.totals(), ids)
  }

  /// How keys are named on this server.
  pub fn layout(&self) -> KeyLayout {
    self.target.layout()
  }

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
    self.options.timeout
  }

  /// The TLS roots and identity of a `rediss` URL (`None` for plain TCP).
  fn tls_certificates(&self) -> RedisResult<Option<redis::TlsCertificates>> {
    if !self.target.tls {
      return Ok(None);
    }
    certificates(&self.options.tls)
      .map(Some)
      .map_err(|e| RedisError::from((redis::ErrorKind::InvalidClientConfig, "TLS", e.to_string())))
  }

  fn client_of(&self, info: &redis::ConnectionInfo) -> RedisResult<Client> {
    match self.tls_certificates()? {
      Some(certs) => Client::build_with_tls(info.clone(), certs),
      None => Client::open(info.clone()),
    }
  }

  async fn connection(&self) -> RedisResult<Conn> {
    match &self.target.topology {
      Topology::Sentinel(sentinel) => self.primary(sentinel).await,
      Topology::Single(info) => self.single(info),
      Topology::Cluster(nodes) => {
        let cluster = self.cluster.get_or_try_init(|| async {
          let mut builder = ClusterClientBuilder::new(nodes.clone())
            .connection_timeout(self.timeout())
            .response_timeout(self.timeout())
            .retries(2)
            .min_retry_wait(10)
            .max_retry_wait(200);
          if let Some(certs) = self.tls_certificates()? {
            builder = builder.tls(TlsMode::Secure).certs(certs);
          }
          builder.build()?.get_async_connection().await
        });
        Ok(Conn::Cluster(cluster.await?.clone()))
      }
    }
  }

  /// The single server's connection manager: the one kept, or a new one (it connects on
  /// first use, and again by itself after a dropped connection).
  fn single(&self, info: &redis::ConnectionInfo) -> RedisResult<Conn> {
    let mut slot = self.single.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(manager) = &slot.0 {
      return Ok(Conn::Single(manager.clone(), slot.1));
    }
    let config = ConnectionManagerConfig::new()
      .set_connection_timeout(Some(self.timeout()))
      .set_response_timeout(Some(self.timeout()))
      .set_number_of_retries(2)
      .set_min_delay(Duration::from_millis(10))
      .set_max_delay(Duration::from_millis(200));
    let manager = ConnectionManager::new_lazy_with_config(self.client_of(info)?, config)?;
    slot.1 += 1;
    slot.0 = Some(manager.clone());
    Ok(Conn::Single(manager, slot.1))
  }

  /// The connection to the primary the Sentinels name: the one kept, or a new answer.
  async fn primary(&self, target: &SentinelTarget) -> RedisResult<Conn> {
    let sentinels = self
      .sentinels
      .get_or_try_init(|| async {
        let addrs = target
          .sentinels
          .iter()
          .map(|(host, port)| match self.target.tls {
            true => ConnectionAddr::TcpTls {
              host: host.clone(),
              port: *port,
              insecure: false,
              tls_params: None,
            },
            false => ConnectionAddr::Tcp(host.clone(), *port),
          });
        let mut builder =
          SentinelClientBuilder::new(addrs, &target.master, SentinelServerType::Master)?
            .set_client_to_redis_db(target.db);
        if let Some(user) = &target.username {
          builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &target.password {
          builder = builder.set_client_to_redis_password(password);
        }
        if let Some(certs) = self.tls_certificates()? {
          builder = builder
            .set_client_to_redis_tls_mode(TlsMode::Secure)
            .set_client_to_redis_certificates(certs.clone())
            .set_client_to_sentinel_tls_mode(TlsMode::Secure)
            .set_client_to_sentinel_certificates(certs);
        }
        RedisResult::Ok(Sentinels {
          client: tokio::sync::Mutex::new(builder.build()?),
          primary: Mutex::new((None, 0)),
        })
      })
      .await?;
    let kept = || {
      let guard = sentinels.primary.lock().unwrap_or_else(|e| e.into_inner());
      guard.0.clone().map(|c| Conn::Primary(c, guard.1))
    };
    if let Some(conn) = kept() {
      return Ok(conn);
    }
    // One answer at a time: callers waiting here use the connection the first one made.
    let mut client = sentinels.client.lock().await;
    if let Some(conn) = kept() {
      return Ok(conn);
    }
    let primary = client.async_get_client().await?;
    let config = AsyncConnectionConfig::new()
      .set_connection_timeout(Some(self.timeout()))
      .set_response_timeout(Some(self.timeout()));
    let conn = primary
      .get_multiplexed_async_connection_with_config(&config)
      .await?;
    let mut guard = sentinels.primary.lock().unwrap_or_else(|e| e.into_inner());
    guard.1 += 1;
    guard.0 = Some(conn.clone());
    Ok(Conn::Primary(conn, guard.1))
  }

  /// Forgets a connection `err` showed unusable, so the next attempt makes a new one: the
  /// Sentinels' primary when it is gone or demoted (they are asked again), and a single
  /// server's manager after a failed authentication — the manager reconnects by itself
  /// only after an I/O error, and keeps any other failed reconnect as its connection for
  /// good (a password rotated on the server would end quota on Redis until a restart).
  fn forget_failed(&self, conn: &Conn, err: &RedisError) {
    match conn {
      Conn::Primary(_, generation) if is_connection_failure(err) || is_readonly(err) => {
        if let Some(sentinels) = self.sentinels.get() {
          let mut guard = sentinels.primary.lock().unwrap_or_else(|e| e.into_inner());
          if guard.1 == *generation {
            guard.0 = None;
          }
        }
      }
      Conn::Single(_, generation) if err.kind() == redis::ErrorKind::AuthenticationFailed => {
        let mut slot = self.single.lock().unwrap_or_else(|e| e.into_inner());
        if slot.1 == *generation {
          slot.0 = None;
        }
      }
      _ => {}
    }
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
          Ok(conn) => {
            let result = attempt(conn.clone()).await;
            if let Err(err) = &result {
              self.forget_failed(&conn, err);
            }
            result
          }
          Err(err) => Err(err),
        };
        match result {
          Err(err) if !retried && retryable(&err, retry) => retried = true,
          other => return other,
        }
      }
    };
    let result = self
      .within(async { run.await.map_err(|err| self.classify(&err)) })
      .await;
    if result.is_ok() {
      self.answered.store(true, Ordering::Relaxed);
    }
    result
  }

  /// `operation`, given up (dropped) when it takes longer than the timeout: the bound on
  /// everything one call waits for, a flush it must come after or a read included.
  pub async fn within<T>(&self, operation: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(self.timeout(), operation)
      .await
      .unwrap_or_else(|_| Err(self.no_answer()))
  }

  /// The timeout's error, whichever clock saw it: this bound or redis-rs's own.
  fn no_answer(&self) -> QuotaError {
    QuotaError::Unavailable(format!(
      "Redis at {} did not answer within {} ms (connection down or server stalled{})",
      self.target.display,
      self.timeout().as_millis(),
      self.tls_hint()
    ))
  }

  /// A plaintext server takes a TLS handshake for a command that never ends; a TLS-only
  /// port ends a plaintext connection at its first bytes, or (some managed services) never
  /// answers it. Until a call through the URL has succeeded, its scheme is a likely cause.
  fn tls_hint(&self) -> &'static str {
    match (self.answered.load(Ordering::Relaxed), self.target.tls) {
      (true, _) => "",
      (false, true) => "; a rediss:// URL: does the server speak TLS on this port?",
      (false, false) => "; a redis:// URL: does the server take only TLS (rediss://)?",
    }
  }

  /// A Redis error as the engine names it: a connection failure, or a store error.
  fn classify(&self, err: &RedisError) -> QuotaError {
    if err.is_timeout() {
      return self.no_answer();
    }
    if is_connection_failure(err) {
      let hint = match err.is_connection_dropped() && !err.is_connection_refusal() {
        true => self.tls_hint(),
        false => "",
      };
      QuotaError::Unavailable(format!(
        "cannot connect to Redis at {}: {err}{hint}",
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
    self.invalidate_written(call);
    let result = self
      .execute(retry, move |mut conn| {
        Box::pin(async move { invocation.invoke_async(&mut conn).await })
      })
      .await;
    self.invalidate_written(call);
    result
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
    // A raw write (the ioredis-like client's) that may change a counter: one naming a
    // counter key, or a script or flush (the tracking connection hears of it too, later).
    let written = retry == Retry::Write && self.view.is_up() && may_write_counters(args);
    if written {
      self.view.reset();
    }
    let result = self
      .execute(retry, move |mut conn| {
        Box::pin(async move { cmd.query_async::<Value>(&mut conn).await })
      })
      .await;
    if written {
      self.view.reset();
    }
    result
  }
}

/// Whether a raw command may change a counter: it names a key of the engine's prefix, or it
/// is a script, a function call or a flush, whose keys are not all in its arguments.
fn may_write_counters(args: &[String]) -> bool {
  let name = args
    .first()
    .map(|n| n.to_ascii_uppercase())
    .unwrap_or_default();
  name.starts_with("EVAL")
    || name.starts_with("FCALL")
    || name.starts_with("FLUSH")
    || name == "SWAPDB"
    || args[1..].iter().any(|a| a.starts_with("omniroute:quota"))
}

/// An error that says the server could not be reached or answer (as opposed to one it
/// answered with).
pub(crate) fn is_connection_failure(err: &RedisError) -> bool {
  err.is_io_error()
    || err.is_connection_refusal()
    || err.is_connection_dropped()
    || err.is_timeout()
    || err.is_cluster_error()
    || matches!(
      err.kind(),
      redis::ErrorKind::ClusterConnectionNotFound
        | redis::ErrorKind::Io
        // No Sentinel named a primary that answers as one: a failover in progress, or
        // every Sentinel down.
        | redis::ErrorKind::MasterNameNotFoundBySentinel
        | redis::ErrorKind::EmptySentinelList
    )
}

/// A `READONLY` reply: the node is a replica now (a failover demoted it); nothing was
/// written.
fn is_readonly(err: &RedisError) -> bool {
  err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
    || err.code() == Some("READONLY")
}

fn retryable(err: &RedisError, retry: Retry) -> bool {
  err.is_connection_refusal()
    || is_readonly(err)
    || (retry == Retry::Read && is_connection_failure(err))
}

/// The backends by URL, one per URL string: the registry that the drivers, the
/// ioredis-like client and the write-behind flushes share, owned by the engine.
#[derive(Default)]
pub struct Backends(Mutex<HashMap<String, Arc<RedisBackend>>>);

impl Backends {
  /// The backend of `url`, created on first use with `options` (which the engine's
  /// configuration gives). Invalid URLs are a `RangeError` naming `url`.
  pub fn get(
    &self,
    url: &str,
    options: impl FnOnce() -> RedisOptions,
  ) -> Result<Arc<RedisBackend>> {
    let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = map.get(url) {
      return Ok(found.clone());
    }
    let options = options();
    let target = parse_target(url, options.cluster)?;
    let created = Arc::new(RedisBackend::new(url, target, options));
    map.insert(url.to_string(), created.clone());
    Ok(created)
  }

  /// Forgets the backend of `url` (every backend with `None`): its connection closes once
  /// the operations in flight on it have finished; the next use connects anew.
  pub fn forget(&self, url: Option<&str>) {
    let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
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
    let options = RedisOptions::default;
    let backends = Backends::default();
    let a = backends.get(url, options).unwrap();
    let b = backends.get(url, options).unwrap();
    assert_eq!(a.url(), url);
    assert!(Arc::ptr_eq(&a, &b));
    backends.forget(Some(url));
    let c = backends.get(url, options).unwrap();
    assert!(!Arc::ptr_eq(&a, &c));
    assert!(backends.get("nope", options).is_err());
  }
}
