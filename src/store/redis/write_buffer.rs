//! `recordConsumption`'s write-behind buffer on Redis (docs/redis.md#write-behind): the
//! increments of one process, coalesced per counter (API key, dimension key, bucket) until
//! the engine flushes them in one script call (one per pool in a cluster). Pure data: the
//! engine (`engine/redis_writes.rs`) owns one per Redis URL, times the flushes and runs
//! them. Counters handed to a flush stay visible here ("in flight") until it answers, so
//! this process's own reads add them at every moment. A flush that failed is sent again as
//! it was, under its id, before any later one: `flush.lua` applies an id once, so one that
//! Redis applied before its answer was lost (a timeout) is not counted twice.

use super::keys::{base_pool_id, KeyLayout};
use super::scripts::{flush_call, ReadBatch, ScriptCall};
use crate::core::dimensions::{bucket_index, DimensionKey};
use crate::core::enforce::Buckets;
use std::collections::HashMap;

/// One counter: the API key, the dimension key, the bucket index.
pub type Counter = (String, DimensionKey, i64);

/// The increments taken by one flush.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Taken {
  /// Its number among the flushes of its buffer, rising: Redis applies each once.
  pub id: u64,
  /// Where it goes: its pool in a cluster, else "" (one flush for all).
  pub route: String,
  pub counters: Vec<(Counter, f64)>,
}

impl Taken {
  /// The script call that writes it, as flush `id` of `writer`.
  pub fn call(&self, layout: KeyLayout, writer: &str) -> ScriptCall {
    let counters = self.counters.iter();
    flush_call(
      layout,
      (writer, self.id),
      counters.map(|((id, key, bucket), amount)| (id.as_str(), key, *bucket, *amount)),
    )
  }
}

/// The buffer of one Redis URL.
#[derive(Debug)]
pub struct WriteBuffer {
  /// Who flushes it (random): Redis keeps the last flush id it applied per writer.
  pub writer: String,
  pending: HashMap<Counter, f64>,
  /// Flushes taken and not yet answered, or failed: sent (again) first.
  in_flight: Vec<Taken>,
  next_id: u64,
  /// A flush is scheduled (the engine's timer).
  pub armed: bool,
  /// A flush for a full buffer is on its way and has not taken the counters yet.
  full_flush_queued: bool,
}

impl Default for WriteBuffer {
  fn default() -> Self {
    WriteBuffer {
      writer: crate::store::ids::new_reservation_id(),
      pending: HashMap::new(),
      in_flight: Vec::new(),
      next_id: 0,
      armed: false,
      full_flush_queued: false,
    }
  }
}

impl WriteBuffer {
  /// Adds `writes` (each `(dimension key, cost)`) to `api_key_id`'s current buckets at
  /// `now_ms`.
  pub fn add(&mut self, api_key_id: &str, writes: &[(DimensionKey, f64)], now_ms: i64) {
    for (key, cost) in writes {
      let bucket = bucket_index(now_ms, key.window.ms());
      *self
        .pending
        .entry((api_key_id.to_string(), key.clone(), bucket))
        .or_insert(0.0) += cost;
    }
  }

  /// How many counters wait for a flush or its answer.
  pub fn counters(&self) -> usize {
    self.pending.len()
      + self
        .in_flight
        .iter()
        .map(|t| t.counters.len())
        .sum::<usize>()
  }

  /// The flushes to send, in order: those kept from a failure (as they were), then the
  /// waiting counters as one script call's worth — or, in a cluster, one per pool (a
  /// script's keys share a hash slot there; the model bucket routes with its pool). A
  /// route with a kept flush keeps its waiting counters (coalescing) until that flush is
  /// through. They stay visible until [`Self::written`] or [`Self::failed`]. Called by one
  /// flush at a time, so no flush of theirs is out.
  pub fn take(&mut self, layout: KeyLayout) -> Vec<Taken> {
    self.full_flush_queued = false;
    let kept = self.in_flight.clone();
    let mut taken: Vec<Taken> = Vec::new();
    for (counter, amount) in std::mem::take(&mut self.pending) {
      let route = match layout {
        KeyLayout::Cluster => base_pool_id(&counter.1.pool_id).to_string(),
        KeyLayout::Standalone => String::new(),
      };
      if kept.iter().any(|t| t.route == route) {
        self.pending.insert(counter, amount);
      } else if let Some(flush) = taken.iter_mut().find(|t| t.route == route) {
        flush.counters.push((counter, amount));
      } else {
        self.next_id += 1;
        let (id, counters) = (self.next_id, vec![(counter, amount)]);
        taken.push(Taken {
          id,
          route,
          counters,
        });
      }
    }
    self.in_flight.extend(taken.iter().cloned());
    [kept, taken].concat()
  }

  /// Whether `at` counters wait and no flush started for a full buffer is still to take
  /// them: the caller starts one. The records that come before it takes them start no
  /// other (on a loaded machine, hundreds would each take a few counters).
  pub fn full(&mut self, at: usize) -> bool {
    self.pending.len() >= at && !std::mem::replace(&mut self.full_flush_queued, true)
  }

  /// Whether anything waits or is in flight.
  pub fn holds(&self) -> bool {
    !self.pending.is_empty() || !self.in_flight.is_empty()
  }

  /// Flush `id` answered: its counters are written.
  pub fn written(&mut self, id: u64) {
    self.in_flight.retain(|t| t.id != id);
  }

  /// Flush `id` failed: it is kept to be sent again while the buffer holds at most `max`
  /// counters, else dropped. Returns `(kept, how many)`.
  pub fn failed(&mut self, id: u64, max: usize) -> (bool, usize) {
    let Some(index) = self.in_flight.iter().position(|t| t.id == id) else {
      return (true, 0);
    };
    let (count, keep) = (self.in_flight[index].counters.len(), self.counters() <= max);
    if !keep {
      self.in_flight.remove(index);
    }
    (keep, count)
  }

  /// What this buffer holds (waiting or in flight) for one counter.
  fn amount(&self, api_key_id: Option<&str>, key: &DimensionKey, bucket: i64) -> f64 {
    let matches = |(id, k, b): &Counter| {
      *b == bucket && k == key && api_key_id.is_none_or(|wanted| wanted == id)
    };
    let waiting = match api_key_id {
      // One key's counter is looked up, not searched for.
      Some(id) => self
        .pending
        .get(&(id.to_string(), key.clone(), bucket))
        .copied(),
      None => Some(sum(self.pending.iter(), matches)),
    };
    self
      .in_flight
      .iter()
      .fold(waiting.unwrap_or(0.0), |total, t| {
        total + sum(t.counters.iter().map(|(c, a)| (c, a)), matches)
      })
  }

  /// Adds what is buffered to `values`, `batch`'s reply: a key group gets its key's
  /// buffered buckets, a pool group every key's.
  pub fn overlay(&self, batch: &ReadBatch, values: &mut [Buckets]) {
    if !self.holds() {
      return;
    }
    for ((key, current, who), value) in batch.groups().zip(values.iter_mut()) {
      value.curr += self.amount(who, key, current);
      value.prev += self.amount(who, key, current - 1);
    }
  }
}

/// The amounts of the `counters` that `matches` picks, summed.
fn sum<'a>(
  counters: impl Iterator<Item = (&'a Counter, &'a f64)>,
  matches: impl Fn(&Counter) -> bool,
) -> f64 {
  counters.filter(|(c, _)| matches(c)).map(|(_, a)| a).sum()
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::dimensions::{QuotaUnit, QuotaWindow};
  use crate::store::redis::PoolTotals;

  fn dim(pool: &str) -> DimensionKey {
    DimensionKey::new(pool, QuotaUnit::Tokens, QuotaWindow::Hourly)
  }

  #[test]
  fn increments_coalesce_per_counter_and_one_call_carries_them() {
    let mut buffer = WriteBuffer::default();
    let now = 3_600_000 * 10 + 5;
    for _ in 0..100 {
      buffer.add("k1", &[(dim("p"), 2.0), (dim("p:model:m"), 1.0)], now);
    }
    buffer.add("k2", &[(dim("p"), 5.0)], now);
    assert_eq!(buffer.counters(), 3);
    let taken = buffer.take(KeyLayout::Standalone);
    let calls: Vec<ScriptCall> = taken
      .iter()
      .map(|t| t.call(KeyLayout::Standalone, "w"))
      .collect();
    assert_eq!(calls.len(), 1);
    // Three keys and three arguments a counter, then the writer's key and the flush id.
    assert_eq!((calls[0].keys.len(), calls[0].args.len()), (10, 10));
    assert_eq!(calls[0].keys[9], "omniroute:quota-flushed:w");
    assert_eq!(calls[0].args[9], taken[0].id.to_string());
    buffer.written(taken[0].id);
    assert!(!buffer.holds());
    let amounts: Vec<&str> = calls[0].args[..9]
      .iter()
      .step_by(3)
      .map(|s| s.as_str())
      .collect();
    let mut sorted = amounts.clone();
    sorted.sort();
    assert_eq!(sorted, ["100", "200", "5"]);
    // In a cluster: one call per pool (the model bucket routes with its pool).
    buffer.add("k1", &[(dim("p"), 1.0), (dim("p:model:m"), 1.0)], now);
    buffer.add("k1", &[(dim("q"), 1.0)], now);
    let taken = buffer.take(KeyLayout::Cluster);
    let routes = |taken: &[Taken]| taken.iter().map(|t| t.route.clone()).collect::<Vec<_>>();
    let mut sorted = routes(&taken);
    sorted.sort();
    assert_eq!(sorted, ["p", "q"]);
    // A pool whose flush failed keeps its new counters waiting; another pool's go out.
    let (p, q) = match taken[0].route == "p" {
      true => (&taken[0], &taken[1]),
      false => (&taken[1], &taken[0]),
    };
    buffer.failed(p.id, usize::MAX);
    buffer.written(q.id);
    buffer.add("k1", &[(dim("p"), 1.0), (dim("q"), 1.0)], now);
    let again = buffer.take(KeyLayout::Cluster);
    assert_eq!(routes(&again), ["p", "q"]);
    assert_eq!((&again[0], buffer.pending.len()), (p, 1));
  }

  #[test]
  fn a_full_buffer_starts_one_flush_until_that_flush_takes_its_counters() {
    let mut buffer = WriteBuffer::default();
    let mut started = Vec::new();
    for key in ["k1", "k2", "k3", "k4", "(a flush takes them)", "k5", "k6"] {
      match key.starts_with('(') {
        true => drop(buffer.take(KeyLayout::Standalone)),
        false => buffer.add(key, &[(dim("p"), 1.0)], 0),
      }
      started.push(buffer.full(2));
    }
    // 2 waiting start one; more before it takes them, none; after, the next 2 one.
    assert_eq!(started, [false, true, false, false, false, false, true]);
  }

  #[test]
  fn reads_see_waiting_and_in_flight_counters_and_a_failed_flush_keeps_them() {
    let b = |curr, prev| Buckets { curr, prev };
    let mut buffer = WriteBuffer::default();
    let hour = 3_600_000;
    let now = hour * 10 + 5;
    buffer.add("k1", &[(dim("p"), 7.0)], now - hour); // the previous bucket
    buffer.add("k1", &[(dim("p"), 3.0)], now);
    buffer.add("k2", &[(dim("p"), 4.0)], now);
    let mut batch = ReadBatch::new(KeyLayout::Standalone, PoolTotals::Aggregate, []);
    batch.key("k1", &dim("p"), 10);
    batch.pool(&dim("p"), 10);
    batch.key("k3", &dim("p"), 10);
    let mut values = vec![b(1.0, 0.0); 3];
    let taken = buffer.take(KeyLayout::Standalone).remove(0);
    buffer.add("k1", &[(dim("p"), 1.0)], now);
    buffer.overlay(&batch, &mut values);
    assert_eq!(values, [b(5.0, 7.0), b(9.0, 7.0), b(1.0, 0.0)]);
    assert_eq!(buffer.failed(taken.id, usize::MAX), (true, 3));
    assert_eq!(buffer.counters(), 4);
    // Sent again as it was, under its id; the counter that came meanwhile waits for it.
    let again = buffer.take(KeyLayout::Standalone);
    assert_eq!((again, buffer.pending.len()), (vec![taken.clone()], 1));
    let kept = buffer.failed(taken.id, 4);
    assert_eq!(kept, (true, 3), "kept up to the bound");
    buffer.add("k9", &[(dim("p"), 1.0)], now);
    buffer.take(KeyLayout::Standalone);
    let dropped = buffer.failed(taken.id, 4);
    assert_eq!(dropped, (false, 3), "past the bound: dropped");
    assert_eq!(buffer.counters(), 2);
    let rest = buffer.take(KeyLayout::Standalone);
    assert_eq!((rest.len(), rest[0].counters.len()), (1, 2));
    buffer.written(rest[0].id);
    assert!(!buffer.holds());
    let mut values = vec![Buckets::default(); 3];
    buffer.overlay(&batch, &mut values);
    assert_eq!(values[1], Buckets::default());
  }
}
