//! Promises settled from the addon's tokio runtime, rejecting with the crate's errors as
//! JavaScript sees them everywhere else: the right class (`TypeError`, `RangeError`,
//! `Error`) and a stable `code` (`#[napi(catch_unwind)] async fn` cannot set one).

use crate::error::{ArgErrorKind, QuotaError, Result};
use napi::bindgen_prelude::{PromiseRaw, ToNapiValue, Unknown};
use napi::{Env, JsError, JsRangeError, JsTypeError};
use std::future::Future;
use std::sync::Once;

static RUNTIME: Once = Once::new();

/// The worker threads of the addon's tokio runtime: `QUOTA_STORE_REDIS_THREADS` (1..=16),
/// default 1 — the Redis driver's work is I/O on one multiplexed connection, and each
/// extra worker is one more thread handing tasks across cores.
fn worker_threads() -> usize {
  std::env::var("QUOTA_STORE_REDIS_THREADS")
    .ok()
    .and_then(|v| v.trim().parse::<usize>().ok())
    .filter(|n| (1..=16).contains(n))
    .unwrap_or(1)
}

/// Installs the addon's tokio runtime before its first use (napi's default would start
/// one worker per core). Its threads never keep Node's event loop alive.
pub(crate) fn ensure_runtime() {
  RUNTIME.call_once(|| {
    let built = tokio::runtime::Builder::new_multi_thread()
      .worker_threads(worker_threads())
      .thread_name("quota-engine-io")
      .enable_all()
      .build();
    if let Ok(runtime) = built {
      napi::bindgen_prelude::create_custom_tokio_runtime(runtime);
    }
  });
}

/// `err` as a JS error object wrapped for a rejection.
pub(crate) fn rejection(env: &Env, err: QuotaError) -> napi::Error {
  let js = napi::Error::new(err.code(), err.to_string());
  // SAFETY: called on the JS thread with the live environment of the settling callback.
  unsafe {
    let raw = match &err {
      QuotaError::InvalidArg {
        kind: ArgErrorKind::Type,
        ..
      } => JsTypeError::from(js).into_value(env.raw()),
      QuotaError::InvalidArg {
        kind: ArgErrorKind::Range,
        ..
      } => JsRangeError::from(js).into_value(env.raw()),
      QuotaError::Store(_) | QuotaError::Unavailable(_) => JsError::from(js).into_value(env.raw()),
    };
    napi::Error::from(Unknown::from_raw_unchecked(env.raw(), raw))
  }
}

/// Runs `work` on the tokio runtime; the promise resolves to `map(value)` on the JS thread,
/// or rejects with the error (see [`rejection`]).
pub(crate) fn spawn_settled<'env, T, V>(
  env: &'env Env,
  work: impl Future<Output = Result<T>> + Send + 'static,
  map: impl FnOnce(&Env, T) -> napi::Result<V> + 'static,
) -> napi::Result<PromiseRaw<'env, V>>
where
  T: Send + 'static,
  V: ToNapiValue,
{
  ensure_runtime();
  env.spawn_future_with_callback(
    async move { Ok(work.await) },
    move |env, result| match result {
      Ok(value) => map(env, value),
      Err(err) => Err(rejection(env, err)),
    },
  )
}
