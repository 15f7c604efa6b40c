//! Where the database is, and the one way the edge reaches it.
//!
//! The path comes from `installHost({ dbPath })` (a string or a function, called only when
//! the database is opened), else `$DATA_DIR/storage.sqlite` read at open time, else the
//! host's default data dir. The resolver is a JavaScript function, so it lives in a
//! thread-local of the JS thread that installed it.

use crate::error::Result;
use crate::store::sqlite::{
  default_db_path, is_open, with_db, with_hot_db, with_open_db, SqliteDb,
};
use napi::bindgen_prelude::{Function, FunctionRef, Unknown};
use napi::{Env, ValueType};
use std::cell::RefCell;
use std::path::PathBuf;

enum DbPath {
  Default,
  Fixed(PathBuf),
  Resolver(FunctionRef<(), String>),
}

thread_local! {
  static DB_PATH: RefCell<DbPath> = const { RefCell::new(DbPath::Default) };
}

fn env_var(name: &str) -> Option<String> {
  std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Sets the database location: a string, a function returning one, or `undefined` for the
/// default. Takes effect at the next open.
pub(crate) fn set_db_path(value: Option<Unknown>) -> napi::Result<()> {
  let next = match value {
    None => DbPath::Default,
    Some(value) => match value.get_type()? {
      ValueType::Undefined | ValueType::Null => DbPath::Default,
      // SAFETY: the type was checked.
      ValueType::String => DbPath::Fixed(PathBuf::from(unsafe { value.cast::<String>() }?)),
      ValueType::Function => {
        // SAFETY: the type was checked.
        let function = unsafe { value.cast::<Function<(), String>>() }?;
        DbPath::Resolver(function.create_ref()?)
      }
      _ => {
        return Err(napi::Error::new(
          napi::Status::InvalidArg,
          "dbPath: expected a string or a function returning one",
        ))
      }
    },
  };
  DB_PATH.with(|slot| *slot.borrow_mut() = next);
  Ok(())
}

fn resolve_path(env: &Env) -> PathBuf {
  DB_PATH.with(|slot| match &*slot.borrow() {
    DbPath::Default => default_db_path(&env_var),
    DbPath::Fixed(path) => path.clone(),
    DbPath::Resolver(resolver) => resolver
      .borrow_back(env)
      .and_then(|f| f.call(()))
      .map(PathBuf::from)
      .unwrap_or_else(|_| default_db_path(&env_var)),
  })
}

/// Runs `f` on the process's engine connection, opening it first when needed. The path is
/// resolved before the connection's lock is taken, and only when it is not open, so a JS
/// resolver may itself call into the engine. Buffered records are committed first.
pub(crate) fn with_store<T>(env: &Env, f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Result<T> {
  open_and_run(env, false, f)
}

/// [`with_store`] for the hot path's two calls, which read buffered records themselves.
pub(crate) fn with_hot_store<T>(
  env: &Env,
  f: impl FnOnce(&mut SqliteDb) -> Result<T>,
) -> Result<T> {
  open_and_run(env, true, f)
}

fn open_and_run<T>(env: &Env, hot: bool, f: impl FnOnce(&mut SqliteDb) -> Result<T>) -> Result<T> {
  let path = if needs_open() {
    Some(resolve_path(env))
  } else {
    None
  };
  let opened = path.is_some();
  let resolve = || path.clone().unwrap_or_else(resolve_path_without_js);
  let result = if hot {
    with_hot_db(&resolve, f)
  } else {
    with_db(&resolve, f)
  };
  if opened {
    start_sweeper();
    // Say once, at open, what the lock self-test or the pragmas found wrong.
    if let Some(Ok(warnings)) = with_open_db(|db| Ok(db.open_report().warnings())) {
      for warning in warnings {
        super::log_queue::warn("quota:store", warning, None);
      }
    }
  }
  result
}

/// Whether this call will open the connection: it is closed, or — checked only when a JS
/// resolver gives the path, the one case where the path must be known before the lock is
/// taken — the file it has open was deleted or replaced (`with_open_db` then closes it).
/// Without this, a replaced file was reopened at the environment's default path instead of
/// the resolver's.
fn needs_open() -> bool {
  if !is_open() {
    return true;
  }
  let resolver = DB_PATH.with(|slot| matches!(&*slot.borrow(), DbPath::Resolver(_)));
  resolver && with_open_db(|_| Ok(())).is_none()
}

/// Between the check above and the open, another worker thread may have closed the
/// connection; then the JS resolver cannot be called here (the lock is held), so the
/// fixed path or the environment decides.
fn resolve_path_without_js() -> PathBuf {
  DB_PATH.with(|slot| match &*slot.borrow() {
    DbPath::Fixed(path) => path.clone(),
    _ => default_db_path(&env_var),
  })
}

/// `QUOTA_CONSUMPTION_RETENTION_DAYS` (default 14); a bad value is warned about by the JS
/// side's configuration reader and falls back to the default here too.
fn retention_days() -> f64 {
  env_var("QUOTA_CONSUMPTION_RETENTION_DAYS")
    .and_then(|v| v.trim().parse::<f64>().ok())
    .filter(|d| d.is_finite() && *d >= 0.0)
    .unwrap_or(14.0)
}

/// The retention sweep runs hourly on its own thread (which never keeps Node alive), off
/// the request path, through the same single connection.
fn start_sweeper() {
  crate::store::sqlite::spawn_retention_sweeper(
    std::time::Duration::from_secs(3600),
    retention_days,
    |result| {
      if let Err(err) = result {
        super::log_queue::warn(
          "quota:store",
          "retention sweep failed",
          Some(err.to_string()),
        );
      }
    },
  );
}
