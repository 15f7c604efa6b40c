//! The combo scheduler's process-wide state (docs/contract.md §10): in-flight leases,
//! account buckets and DRR deficits, plus the symbol table that names them
//! (docs/scheduler.md, "A bound on names"). Every name the scheduler keys on is interned
//! to a symbol, so a selection passes numbers in a typed array instead of strings. A
//! symbol is `generation << 32 | slot`: a slot freed by an eviction is reused with the next
//! generation, so a stale symbol (held by a JavaScript cache) is never another name's; a
//! selection naming one selects nothing, and state keyed on it is simply not found.

use crate::core::scheduler::account_buckets::QuotaReading;
use crate::core::scheduler::select::{Scheduler, Target};
use rustc_hash::{FxHashMap, FxHashSet};

/// An interned name: `generation << 32 | slot` (below 2⁵³, exact in an `f64`).
pub type Sym = u64;

/// Per target, a selection reads this many numbers: the execution key's symbol, the
/// connection's symbol (or [`NO_CONNECTION`]), the weight (`NaN` when not a number) and the
/// connection's concurrency cap (`NaN` for none).
pub const SELECT_STRIDE: usize = 4;

/// The stand-in for "no connection" in a selection's targets.
pub const NO_CONNECTION: f64 = -1.0;

/// Generations stay below 2²¹ so that every symbol is exact in an `f64`.
const GENERATIONS: u32 = 1 << 21;

/// Set in a free slot's `current` (a symbol never has it).
const FREE: u64 = 1 << 63;

#[derive(Clone, Copy)]
struct Slot {
  /// The symbol the slot stands for; while free, the symbol it will stand for next (the
  /// next generation) with [`FREE`] set. A symbol is current iff it equals this: one
  /// compare.
  current: Sym,
  last_used: u64,
}

/// Names to symbols, bounded, least recently used evicted first.
#[derive(Default)]
pub struct Symbols {
  ids: FxHashMap<Box<str>, Sym>,
  slots: Vec<Slot>,
  free: Vec<u32>,
  clock: u64,
}

fn slot_of(sym: Sym) -> usize {
  (sym & 0xffff_ffff) as usize
}

impl Symbols {
  /// The symbol of `name`, interning it on first sight; marks it used. When the table
  /// holds `max_ids` names already, the least recently used `max_ids / 8` (at least one)
  /// are evicted first and their symbols appended to `evicted`.
  pub fn intern(&mut self, name: &str, max_ids: usize, evicted: &mut Vec<Sym>) -> Sym {
    self.clock += 1;
    if let Some(&sym) = self.ids.get(name) {
      self.slots[slot_of(sym)].last_used = self.clock;
      return sym;
    }
    if self.ids.len() >= max_ids.max(1) {
      self.evict((max_ids / 8).max(1), evicted);
    }
    let slot = match self.free.pop() {
      Some(slot) => slot,
      None => {
        let slot = self.slots.len() as u32;
        self.slots.push(Slot {
          current: FREE | u64::from(slot),
          last_used: 0,
        });
        slot
      }
    };
    let entry = &mut self.slots[slot as usize];
    entry.current &= !FREE;
    entry.last_used = self.clock;
    let sym = entry.current;
    self.ids.insert(name.into(), sym);
    sym
  }

  /// Evicts the `count` least recently used names.
  fn evict(&mut self, count: usize, evicted: &mut Vec<Sym>) {
    let mut ages: Vec<(u64, u32)> = (self.slots.iter().enumerate())
      .filter(|(_, slot)| slot.current & FREE == 0)
      .map(|(i, slot)| (slot.last_used, i as u32))
      .collect();
    let count = count.min(ages.len());
    if count == 0 {
      return;
    }
    if count < ages.len() {
      ages.select_nth_unstable(count - 1);
    }
    let start = evicted.len();
    for &(_, slot) in &ages[..count] {
      let entry = &mut self.slots[slot as usize];
      evicted.push(entry.current);
      let generation = (entry.current >> 32) as u32 + 1;
      entry.current = FREE | (u64::from(generation) << 32) | u64::from(slot);
      // A slot whose generations ran out is never handed out again: wrapping would give an
      // old symbol (a cached array's, a release's) to another name.
      if generation < GENERATIONS {
        self.free.push(slot);
      }
    }
    let gone: FxHashSet<Sym> = evicted[start..].iter().copied().collect();
    self.ids.retain(|_, sym| !gone.contains(sym));
  }

  /// Whether `sym` names a name still interned; if so marks it used with `stamp` (a
  /// selection stamps all its names alike).
  #[inline]
  fn touch_at(&mut self, sym: Sym, stamp: u64) -> bool {
    match self.slots.get_mut(slot_of(sym)) {
      Some(slot) if slot.current == sym => {
        slot.last_used = stamp;
        true
      }
      _ => false,
    }
  }

  /// The symbol of `name` if it is interned: a name never seen (or evicted) has no state.
  pub fn get(&self, name: &str) -> Option<Sym> {
    self.ids.get(name).copied()
  }

  /// How many names are interned.
  pub fn len(&self) -> usize {
    self.ids.len()
  }

  pub fn is_empty(&self) -> bool {
    self.ids.is_empty()
  }
}

/// Everything the scheduler keeps between calls.
#[derive(Default)]
pub struct SchedulerState {
  pub symbols: Symbols,
  pub scheduler: Scheduler<Sym>,
  /// Scratch of a selection, reused between calls.
  pub targets: Vec<Target<Sym>>,
  pub order: Vec<usize>,
}

impl SchedulerState {
  /// The symbol of `name` (see [`Symbols::intern`]); the state of every name evicted to
  /// make room goes with it.
  pub fn intern(&mut self, name: &str, max_ids: usize) -> Sym {
    let mut evicted = Vec::new();
    let sym = self.symbols.intern(name, max_ids, &mut evicted);
    if !evicted.is_empty() {
      self.forget(&evicted);
    }
    sym
  }

  /// Drops every piece of state keyed on `syms`.
  fn forget(&mut self, syms: &[Sym]) {
    let gone: FxHashSet<Sym> = syms.iter().copied().collect();
    let scheduler = &mut self.scheduler;
    scheduler.inflight.retain(|sym| !gone.contains(sym));
    scheduler.buckets.retain(|sym| !gone.contains(sym));
    scheduler
      .drr
      .forget(|combo| gone.contains(combo), |key| gone.contains(key));
  }

  /// One selection over `targets` ([`SELECT_STRIDE`] numbers per target); the order, as
  /// indices into the targets. `None` when the combo's or any target's symbol is not
  /// current (evicted): nothing is selected.
  pub fn select(
    &mut self,
    combo: Sym,
    model_str: Option<&str>,
    now_ms: i64,
    targets: &[f64],
  ) -> Option<&[usize]> {
    // One pass: read each target, and check (and stamp) its symbols on the way.
    let symbols = &mut self.symbols;
    symbols.clock += 1;
    let stamp = symbols.clock;
    let mut current = symbols.touch_at(combo, stamp);
    self.targets.clear();
    for t in targets.chunks_exact(SELECT_STRIDE) {
      let execution_key = t[0] as Sym;
      let connection = (t[1] != NO_CONNECTION).then_some(t[1] as Sym);
      current &= symbols.touch_at(execution_key, stamp)
        & connection.is_none_or(|connection| symbols.touch_at(connection, stamp));
      self.targets.push(Target {
        execution_key,
        connection,
        weight: t[2],
        max_concurrent: t[3],
      });
    }
    if !current {
      return None;
    }
    self
      .scheduler
      .select(&self.targets, &combo, model_str, now_ms, &mut self.order);
    Some(&self.order)
  }
}

/// A part of the scheduler's state, for the host's `_…ForTest` functions.
#[derive(Clone, Copy)]
pub enum SchedulerPart {
  Buckets,
  Inflight,
  Drr,
}

/// The scheduler's operations on names (docs/contract.md §10). An id of `None` (absent,
/// `null` or `""`) names no connection: nothing is stored for it and it reads as nothing.
impl super::Engine {
  /// `QUOTA_SCHEDULER_MAX_IDS`, read when a new name is interned (never under the state's
  /// lock: a bad value is logged).
  pub fn scheduler_max_ids(&self) -> usize {
    self.number(&super::config::SCHEDULER_MAX_IDS) as usize
  }

  /// The symbol of `name`, interned on first sight.
  pub fn intern(&self, name: &str) -> Sym {
    let max_ids = self.scheduler_max_ids();
    self.scheduler().intern(name, max_ids)
  }

  /// `recordUsage`: one usage reading of `window` (empty: nothing stored).
  pub fn record_usage(
    &self,
    id: Option<&str>,
    window: &str,
    used_pct: f64,
    reset_at: Option<i64>,
    now_ms: i64,
  ) {
    let Some(id) = id.filter(|_| !window.is_empty()) else {
      return;
    };
    let sym = self.intern(id);
    let mut state = self.scheduler();
    let buckets = &mut state.scheduler.buckets;
    buckets.record_usage(&sym, window, used_pct, reset_at, now_ms);
  }

  /// `isBucketSaturated`: a missing entry reads `false`.
  pub fn is_bucket_saturated(&self, id: Option<&str>, window: &str, now_ms: i64) -> bool {
    let mut state = self.scheduler();
    let Some(sym) = id.and_then(|id| state.symbols.get(id)) else {
      return false;
    };
    state.scheduler.buckets.is_saturated(&sym, window, now_ms)
  }

  /// `updateAccountBuckets`: each reading recorded as by [`Self::record_usage`].
  pub fn update_account_buckets(
    &self,
    id: Option<&str>,
    readings: &[(String, QuotaReading)],
    now_ms: i64,
  ) {
    let Some(id) = id else {
      return;
    };
    let sym = self.intern(id);
    let readings = readings.iter().map(|(name, r)| (name.as_str(), *r));
    self
      .scheduler()
      .scheduler
      .buckets
      .update(&sym, readings, now_ms);
  }

  /// `incrementInflight`: the new count (0 for no connection).
  pub fn increment_inflight(&self, id: Option<&str>, lease_ms: i64, now_ms: i64) -> u32 {
    let Some(id) = id else {
      return 0;
    };
    let sym = self.intern(id);
    let mut state = self.scheduler();
    state.scheduler.inflight.increment(&sym, lease_ms, now_ms)
  }

  /// `decrementInflight`: unknown ids are ignored.
  pub fn decrement_inflight(&self, id: Option<&str>, now_ms: i64) {
    let mut state = self.scheduler();
    if let Some(sym) = id.and_then(|id| state.symbols.get(id)) {
      state.scheduler.inflight.decrement(&sym, now_ms);
    }
  }

  /// `getInflight`: 0 when unknown or expired; reading changes nothing.
  pub fn inflight(&self, id: Option<&str>, now_ms: i64) -> u32 {
    let state = self.scheduler();
    id.and_then(|id| state.symbols.get(id))
      .map_or(0, |sym| state.scheduler.inflight.get(&sym, now_ms))
  }

  /// `__quotaShareRelease`: the in-flight lease a selection at `now_ms` took on the
  /// connection with symbol `connection` ends.
  pub fn release_lease(&self, connection: Sym, now_ms: i64) {
    self
      .scheduler()
      .scheduler
      .inflight
      .decrement(&connection, now_ms);
  }

  /// `_clearBucketsForTest()`, `_clearInflightForTest()`, `_clearDrrStateForTest()`.
  pub fn clear_scheduler_for_tests(&self, what: SchedulerPart) {
    let mut state = self.scheduler();
    match what {
      SchedulerPart::Buckets => state.scheduler.buckets.clear(),
      SchedulerPart::Inflight => state.scheduler.inflight.clear(),
      SchedulerPart::Drr => state.scheduler.drr.clear(),
    }
  }

  /// `_bucketCountForTest()` / `_inflightSizeForTest()`: how many entries are kept.
  pub fn scheduler_len_for_tests(&self, what: SchedulerPart) -> u32 {
    let state = self.scheduler();
    (match what {
      SchedulerPart::Buckets => state.scheduler.buckets.len(),
      SchedulerPart::Inflight => state.scheduler.inflight.len(),
      SchedulerPart::Drr => state.scheduler.drr.combo_count(),
    }) as u32
  }

  /// The DRR deficit of `key` in `combo` (0 when there is none).
  pub fn drr_deficit(&self, combo: &str, key: &str) -> f64 {
    let state = self.scheduler();
    match (state.symbols.get(combo), state.symbols.get(key)) {
      (Some(combo), Some(key)) => state.scheduler.drr.deficit(&combo, &key),
      _ => 0.0,
    }
  }
}
