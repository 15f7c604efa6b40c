//! The combo scheduler's process-wide state (CONTRACT §10): in-flight leases, account
//! buckets and DRR deficits, behind one mutex, plus the symbol table that names them.
//!
//! Every name the scheduler keys on — connection ids, execution keys, combo names — is
//! interned once to a `u32` symbol, so the hot path (`selectQuotaShareTarget`) passes
//! numbers in a typed array instead of strings; `lib/quotaShareStrategy.js` keeps a
//! `Map` from name to symbol beside it. Symbols are process-wide and never reused, so the
//! JavaScript caches of several isolates (worker threads) agree with each other. The table
//! grows with the number of distinct names seen — the host's connections, combos and their
//! targets, a bounded set. Request-supplied strings (the model) are never interned.

use super::args::Arg;
use crate::core::scheduler::fast_hash::FxHashMap;
use crate::core::scheduler::select::{Scheduler, Target};
use crate::error::{QuotaError, Result};
use napi::bindgen_prelude::Unknown;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// An interned name.
pub(crate) type Sym = u32;

/// Names to symbols; symbols are dense, in order of first sight.
#[derive(Default)]
pub(crate) struct Symbols {
  ids: FxHashMap<Box<str>, Sym>,
}

impl Symbols {
  /// The symbol of `name`, interning it on first sight.
  pub fn intern(&mut self, name: &str) -> Sym {
    if let Some(&id) = self.ids.get(name) {
      return id;
    }
    let id = self.ids.len() as Sym;
    self.ids.insert(name.into(), id);
    id
  }

  /// The symbol of `name` if it was ever interned: a name never seen has no state.
  pub fn get(&self, name: &str) -> Option<Sym> {
    self.ids.get(name).copied()
  }
}

/// Everything behind the mutex.
#[derive(Default)]
pub(crate) struct State {
  pub symbols: Symbols,
  pub scheduler: Scheduler<Sym>,
  /// Scratch of a selection, reused between calls.
  pub targets: Vec<Target<Sym>>,
  pub order: Vec<usize>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);

/// The process-wide state. Nothing panics while holding it, but a poisoned lock is taken
/// over rather than propagated: the state is plain data, consistent between calls.
pub(crate) fn state() -> MutexGuard<'static, State> {
  STATE
    .lock()
    .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A time argument in epoch ms: `Date.now()` when absent (`undefined`/`null`), else a
/// finite number, floored to whole milliseconds (which keeps every `>=` against a whole
/// millisecond exactly as JavaScript compares).
pub(crate) fn read_time(value: Option<Unknown>, field: &str) -> Result<i64> {
  let Some(value) = value else {
    return Ok(super::burn_rate::now_ms());
  };
  match Arg::new(value, field)?.opt_number()? {
    None => Ok(super::burn_rate::now_ms()),
    Some(ms) => time_from_f64(ms, field),
  }
}

/// A finite number of epoch ms, floored.
pub(crate) fn time_from_f64(ms: f64, field: &str) -> Result<i64> {
  if ms.is_finite() {
    Ok(ms.floor() as i64)
  } else {
    Err(QuotaError::range_error(
      field,
      format!("must be a finite number of milliseconds, got {ms}"),
    ))
  }
}

/// A connection id: `None` for `undefined`, `null` or `""` (no connection: nothing is
/// stored for it), else the string; any other type is a `TypeError`.
pub(crate) fn read_connection_id(value: Unknown, field: &str) -> Result<Option<String>> {
  Ok(
    Arg::new(value, field)?
      .opt_string()?
      .filter(|id| !id.is_empty()),
  )
}
