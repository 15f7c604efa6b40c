//! Promises settled from the addon's tokio runtime, rejecting with the crate's errors as
//! JavaScript sees them everywhere else: the right class (`TypeError`, `RangeError`,
//! `Error`) and a stable `code` (`#[napi(catch_unwind)] async fn` cannot set one).

use super::errors::rejection;
use crate::engine::Step;
use crate::error::Result;
use napi::bindgen_prelude::{Either, PromiseRaw, ToNapiValue};
use napi::Env;
use std::future::Future;
use std::sync::Once;

static RUNTIME: Once = Once::new();

/// Installs the addon's tokio runtime before its first use (napi's default would start
/// one worker per core). Its threads never keep Node's event loop alive.
pub(crate) fn ensure_runtime() {
  RUNTIME.call_once(|| {
    let built = tokio::runtime::Builder::new_multi_thread()
      .worker_threads(super::engine().config.runtime_threads())
      .thread_name("quota-engine-io")
      .enable_all()
      .build();
    if let Ok(runtime) = built {
      napi::bindgen_prelude::create_custom_tokio_runtime(runtime);
    }
  });
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

/// A step that cannot fail (the hot path's, the driver choice) as JS sees it: the value
/// now, or a promise of it (never rejecting).
pub(crate) fn crossing<'env, T: Send + 'static, V: ToNapiValue + 'static>(
  env: &'env Env,
  step: Step<T>,
  shape: impl FnOnce(T) -> V + 'static,
) -> napi::Result<Either<V, PromiseRaw<'env, V>>> {
  match step {
    Step::Now(value) => Ok(Either::A(shape(value))),
    Step::Later(future) => {
      ensure_runtime();
      env
        .spawn_future_with_callback(async move { Ok(future.await) }, move |_, value| {
          Ok(shape(value))
        })
        .map(Either::B)
    }
  }
}
