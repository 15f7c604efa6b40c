//! The only place with `#[napi]`: it holds the process's one [`Engine`] and converts
//! JavaScript values to the engine's types (rejecting bad input with an error naming the
//! field) and its answers back to plain JS values. One native function per operation;
//! which driver serves it is the engine's business, not the edge's.
//!
//! Here too: the addon's tokio runtime, and how an answer crosses back — at once, or as a
//! promise settled from that runtime that rejects with the crate's errors as JavaScript
//! sees them everywhere else: the right class (`TypeError`, `RangeError`, `Error`) and a
//! stable `code` (`#[napi(catch_unwind)] async fn` cannot set one).

mod account_buckets;
pub(crate) mod args;
mod burn_rate;
mod dimensions;
pub(crate) mod errors;
mod fair_share;
pub(crate) mod host;
mod hot_path;
mod inflight;
mod inspect;
mod metadata;
mod plans;
mod quota_share;
mod store;
pub(crate) mod to_js;

use crate::engine::{Engine, Step};
use crate::error::Result;
use crate::store::sqlite::SqliteDb;
use errors::rejection;
use napi::bindgen_prelude::{Either, PromiseRaw, ToNapiValue};
use napi::Env;
use std::future::Future;
use std::sync::{LazyLock, Once};

/// The process's engine: every JS thread (main and workers) loads this one copy of the
/// addon, so they all reach the same instance.
static ENGINE: LazyLock<Engine> = LazyLock::new(|| {
  let engine = Engine::default();
  let _ = engine.spawner.set(Box::new(|future| {
    ensure_runtime();
    napi::bindgen_prelude::spawn(future);
  }));
  engine
});

/// The engine.
pub(crate) fn engine() -> &'static Engine {
  &ENGINE
}

/// `f` on the engine's database (buffered records committed first), this thread's path
/// resolver consulted when the database is about to be opened.
pub(crate) fn with_db<T>(env: &Env, f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Result<T> {
  host::prepare_db_for_store(env);
  engine().with_db(f)
}

/// napi has one tokio runtime per process, so it is installed once, whatever the thread.
static RUNTIME: Once = Once::new();

/// Installs the addon's tokio runtime before its first use (napi's default would start
/// one worker per core). Its threads never keep Node's event loop alive.
pub(crate) fn ensure_runtime() {
  RUNTIME.call_once(|| {
    let built = tokio::runtime::Builder::new_multi_thread()
      .worker_threads(engine().config.runtime_threads())
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
