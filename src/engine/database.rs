//! Where the engine's database is, and the one way the engine reaches it
//! (docs/contract.md §0, §4).
//!
//! The path comes from `installHost({ dbPath })` — a string, or a function the edge calls
//! when the database is about to be opened — else `$DATA_DIR/storage.sqlite` read at open
//! time, else the host's default data dir. The setting is process-wide: a worker thread
//! that never called `installHost` opens the file the main thread configured (a resolver
//! function can only run on the thread that gave it, so other threads use the path it
//! last returned).

use super::config::process_env;
use super::logs::LogQueue;
use crate::error::Result;
use crate::store::sqlite::{
  default_db_path, is_open, with_buffer_db, with_db, with_hot_db, with_hot_open_db, SqliteDb,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// How a call uses the connection (docs/sqlite.md#one-connection-per-process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
  /// Buffered records are committed first.
  Full,
  /// The hot path: it adds the buffer to its reads itself.
  Hot,
  /// A record that only adds to the buffer: the file is not checked.
  Buffer,
}

/// How the path is given.
#[derive(Debug, Clone, PartialEq)]
pub enum PathSource {
  /// `$DATA_DIR/storage.sqlite`, or the host's default data dir.
  Default,
  /// A fixed path.
  Fixed(PathBuf),
  /// A resolver on some JS thread; `last` is what it last returned.
  Resolver { last: Option<PathBuf> },
}

/// The process's database location, and what was said about it.
pub struct Database {
  /// The path, and the thread that installed it (`None`: nobody, the default).
  source: Mutex<(PathSource, Option<std::thread::ThreadId>)>,
  /// Whether `source` is a resolver: read on every call, without the lock.
  resolver: AtomicBool,
  /// Problems with the resolver already reported (once per distinct problem).
  reported: Mutex<Vec<String>>,
}

impl Default for Database {
  fn default() -> Self {
    Database {
      source: Mutex::new((PathSource::Default, None)),
      resolver: AtomicBool::new(false),
      reported: Mutex::new(Vec::new()),
    }
  }
}

/// The default location: `$DATA_DIR/storage.sqlite`, or the host's default data dir.
pub fn default_path() -> PathBuf {
  default_db_path(&process_env)
}

impl Database {
  /// Sets how the path is given, for the whole process, from thread `by`; takes effect at
  /// the next open. A thread that gives no path (the default) does not undo a path another
  /// thread installed — a worker calling `installHost({ logger })` keeps the process on the
  /// main thread's file. Returns whether the setting changed.
  pub fn set_source(&self, source: PathSource, by: std::thread::ThreadId) -> bool {
    let mut slot = self.source.lock().unwrap_or_else(|e| e.into_inner());
    if source == PathSource::Default && slot.1.is_some_and(|owner| owner != by) {
      return false;
    }
    self.resolver.store(
      matches!(source, PathSource::Resolver { .. }),
      Ordering::Release,
    );
    let owner = (source != PathSource::Default).then_some(by);
    *slot = (source, owner);
    true
  }

  /// Whether the path comes from a resolver function (no lock: read on every call).
  pub fn has_resolver(&self) -> bool {
    self.resolver.load(Ordering::Acquire)
  }

  /// What the resolver returned: a path (kept as the process's), or a problem — reported
  /// once per distinct problem, naming the fallback — after which the last good path, or
  /// the default, is used.
  pub fn resolved(&self, logs: &LogQueue, answer: std::result::Result<String, String>) {
    let mut source = self.source.lock().unwrap_or_else(|e| e.into_inner());
    let PathSource::Resolver { last } = &mut source.0 else {
      return;
    };
    match answer {
      Ok(path) if !path.is_empty() => *last = Some(PathBuf::from(path)),
      Ok(_) => self.report(logs, "returned an empty string".to_string(), last.clone()),
      Err(problem) => self.report(logs, problem, last.clone()),
    }
  }

  fn report(&self, logs: &LogQueue, problem: String, last: Option<PathBuf>) {
    let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
    if reported.contains(&problem) {
      return;
    }
    if reported.len() > 100 {
      reported.clear();
    }
    reported.push(problem.clone());
    let fallback = last.unwrap_or_else(default_path);
    logs.warn(
      "quota:store",
      format!(
        "installHost dbPath resolver {problem}; using {}",
        fallback.display()
      ),
      None,
    );
  }

  /// The path to open now.
  pub fn path(&self) -> PathBuf {
    match &self.source.lock().unwrap_or_else(|e| e.into_inner()).0 {
      PathSource::Default | PathSource::Resolver { last: None } => default_path(),
      PathSource::Fixed(path) | PathSource::Resolver { last: Some(path) } => path.clone(),
    }
  }

  /// Whether the next call opens the database: it is closed, or — checked only with a
  /// resolver, the one case where the path must be known before the connection's lock is
  /// taken — the file it has open was deleted or replaced (`with_hot_open_db` then closes
  /// it). The check commits nothing: buffered records wait for their commit by time, as
  /// with a string path.
  pub fn needs_open(&self) -> bool {
    !is_open() || (self.has_resolver() && with_hot_open_db(|_| Ok(())).is_none())
  }

  /// Runs `f` on the process's connection, opening it first when needed (`hot`: the hot
  /// path, which reads buffered records itself, so they are not committed first).
  /// Returns whether this call opened it.
  pub fn run<T>(
    &self,
    access: Access,
    f: impl FnOnce(&mut SqliteDb) -> Result<T>,
  ) -> (Result<T>, bool) {
    let opened = std::cell::Cell::new(false);
    let resolve = || {
      opened.set(true);
      self.path()
    };
    let result = match access {
      Access::Full => with_db(&resolve, f),
      Access::Hot => with_hot_db(&resolve, f),
      Access::Buffer => with_buffer_db(&resolve, f),
    };
    (result, opened.get())
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn a_resolver_problem_is_reported_once_and_names_the_fallback() {
    let logs = LogQueue::default();
    let db = Database::default();
    let me = std::thread::current().id();
    db.set_source(PathSource::Resolver { last: None }, me);
    db.resolved(&logs, Err("threw: boom".into()));
    db.resolved(&logs, Err("threw: boom".into()));
    let warned = logs.take().unwrap();
    assert_eq!(warned.len(), 1);
    assert!(
      warned[0].msg.contains("threw: boom; using "),
      "{}",
      warned[0].msg
    );
    db.resolved(&logs, Ok("/tmp/x/storage.sqlite".into()));
    assert_eq!(db.path(), PathBuf::from("/tmp/x/storage.sqlite"));
    db.resolved(&logs, Err("returned a number".into()));
    assert!(logs.take().unwrap()[0]
      .msg
      .contains("using /tmp/x/storage.sqlite"));
    assert_eq!(db.path(), PathBuf::from("/tmp/x/storage.sqlite"));
    db.set_source(PathSource::Fixed("/a/b".into()), me);
    assert_eq!(db.path(), PathBuf::from("/a/b"));
    assert!(!db.has_resolver());
    // Another thread that installs no path keeps this one; it may install its own.
    let other = std::thread::spawn(|| std::thread::current().id())
      .join()
      .unwrap();
    assert!(!db.set_source(PathSource::Default, other));
    assert_eq!(db.path(), PathBuf::from("/a/b"));
    assert!(db.set_source(PathSource::Fixed("/c".into()), other));
    assert!(db.set_source(PathSource::Default, other));
    assert!(db.set_source(PathSource::Default, me));
  }
}
