//! The counter view's tracking connection (docs/redis.md#the-counter-view): one RESP3
//! connection per Redis URL, apart from the one commands use, with
//! `CLIENT TRACKING ON BCAST PREFIX omniroute:quota: PREFIX omniroute:quota-total:` —
//! broadcasting mode, so the server reports every change to a key of those prefixes by
//! any client without remembering which keys this client read (the hot path reads its
//! counters inside a script). The server's `invalidate` pushes, and the library's
//! `Disconnection` when the socket closes, arrive on the channel given.
//!
//! (The `redis` crate's own client-side cache is not used: it caches the replies of
//! plain read commands, and the hot path's reads are one script call.)

use super::connection::RedisBackend;
use super::view::TRACKED_PREFIXES;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, RedisError};
use tokio::sync::mpsc::UnboundedSender;

/// Why a tracking connection could not be had.
#[derive(Debug)]
pub enum TrackingError {
  /// The server answered and refused (no `HELLO 3` or no `CLIENT TRACKING`: Redis < 6,
  /// or a proxy that does not pass them): there will be no view on this URL.
  Refused(String),
  /// The server could not be reached: try again later.
  Unreachable(String),
  /// A cluster or a Sentinel-managed primary: no view (see `supports_view`).
  Unsupported,
}

fn classify(err: RedisError) -> TrackingError {
  if err.is_io_error()
    || err.is_connection_refusal()
    || err.is_connection_dropped()
    || err.is_timeout()
  {
    TrackingError::Unreachable(err.to_string())
  } else {
    TrackingError::Refused(err.to_string())
  }
}

/// Opens the tracking connection of `backend`'s server, its pushes sent to `pushes`. The
/// connection stays subscribed while the returned value lives.
pub async fn subscribe(
  backend: &RedisBackend,
  pushes: UnboundedSender<PushInfo>,
) -> Result<MultiplexedConnection, TrackingError> {
  let info = backend.single_info().ok_or(TrackingError::Unsupported)?;
  let mut settings = info.redis_settings().clone();
  settings = settings.set_protocol(ProtocolVersion::RESP3);
  let info = info.clone().set_redis_settings(settings);
  let client = backend.client_for(&info).map_err(classify)?;
  let config = AsyncConnectionConfig::new()
    .set_connection_timeout(Some(backend.timeout()))
    .set_response_timeout(Some(backend.timeout()))
    .set_push_sender(pushes);
  let work = async {
    let mut conn = client
      .get_multiplexed_async_connection_with_config(&config)
      .await
      .map_err(classify)?;
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("TRACKING").arg("ON").arg("BCAST");
    for prefix in TRACKED_PREFIXES {
      cmd.arg("PREFIX").arg(prefix);
    }
    cmd.query_async::<()>(&mut conn).await.map_err(classify)?;
    Ok(conn)
  };
  match tokio::time::timeout(backend.timeout() * 2, work).await {
    Ok(result) => result,
    Err(_) => Err(TrackingError::Unreachable(format!(
      "no answer within {} ms",
      (backend.timeout() * 2).as_millis()
    ))),
  }
}
