//! The Lua scripts every counter operation goes through, and their arguments.
//!
//! Building a call is pure (keys and arguments as strings, unit-tested here); running it
//! is `connection.rs`'s. Scripts are called by SHA (EVALSHA) and loaded once per server
//! (SCRIPT LOAD on the first NOSCRIPT reply, after a restart or a `SCRIPT FLUSH`).
//!
//! - `write.lua`: INCRBYFLOAT + EXPIRE of the current bucket (exactly what the host's
//!   TypeScript driver did), SADD + EXPIRE of the current bucket's members set,
//!   INCRBYFLOAT + EXPIRE of the bucket's total, GET of the previous bucket; for one or
//!   several dimensions of one API key, atomically.
//! - `read.lua`: groups of `(dimension key, current bucket, previous bucket, who)`, `who`
//!   being one API key or the whole pool — the listed ids plus the members of both
//!   buckets ([`PoolTotals::Exact`]), or the buckets' totals ([`PoolTotals::Aggregate`]) —
//!   each answered with its summed `(curr, prev)`.
//! - `clear.lua`: DEL of a key's two buckets, their values taken out of the totals.

use super::keys::{dimension_part, id_part, ttl_seconds, KeyLayout, PoolTotals};
use crate::core::dimensions::{bucket_index, DimensionKey};
use crate::core::enforce::Buckets;
use crate::error::{QuotaError, Result};
use redis::Script;
use std::collections::HashMap;
use std::sync::LazyLock;

/// `write.lua`.
pub static WRITE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/write.lua")));
/// `read.lua`.
pub static READ: LazyLock<Script> = LazyLock::new(|| {
  Script::new(concat!(
    include_str!("lua/groups.lua"),
    include_str!("lua/read.lua")
  ))
});
/// `reserve.lua`.
pub static RESERVE: LazyLock<Script> = LazyLock::new(|| {
  Script::new(concat!(
    include_str!("lua/groups.lua"),
    include_str!("lua/reserve.lua")
  ))
});
/// `settle.lua`.
pub static SETTLE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/settle.lua")));
/// `flush.lua`.
pub static FLUSH: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/flush.lua")));
/// `clear.lua`.
pub static CLEAR: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/clear.lua")));

/// Which script a call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptName {
  Write,
  Read,
  Reserve,
  Settle,
  Clear,
  Flush,
}

impl ScriptName {
  /// The script itself (its SHA is computed once).
  pub fn script(self) -> &'static Script {
    match self {
      ScriptName::Write => &WRITE,
      ScriptName::Read => &READ,
      ScriptName::Reserve => &RESERVE,
      ScriptName::Settle => &SETTLE,
      ScriptName::Clear => &CLEAR,
      ScriptName::Flush => &FLUSH,
    }
  }
}

/// One script invocation: `EVALSHA <sha> <keys.len()> keys… args…`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptCall {
  pub script: ScriptName,
  pub keys: Vec<String>,
  pub args: Vec<String>,
}

/// A cost as INCRBYFLOAT takes it: Rust's shortest round-trip decimal (never an
/// exponent, which INCRBYFLOAT would also accept), saturated at ±COUNTER_MAX (the
/// scripts saturate the sum too).
fn decimal(value: f64) -> String {
  let cap = crate::store::validate::COUNTER_MAX;
  format!("{}", value.clamp(-cap, cap))
}

/// `write.lua` adding each `(dimension key, cost)` to `api_key_id`'s current bucket at
/// `now_ms`. Its reply parses with [`parse_pairs`], one `Buckets` per write.
pub fn write_call(
  layout: KeyLayout,
  api_key_id: &str,
  writes: &[(DimensionKey, f64)],
  now_ms: i64,
) -> ScriptCall {
  let mut keys = Vec::with_capacity(writes.len() * 4);
  let mut args = Vec::with_capacity(1 + writes.len() * 2);
  args.push(id_part(api_key_id).into_owned());
  for (key, cost) in writes {
    let current = bucket_index(now_ms, key.window.ms());
    keys.push(layout.bucket_key(api_key_id, key, current));
    keys.push(layout.bucket_key(api_key_id, key, current - 1));
    keys.push(layout.members_key(key, current));
    keys.push(layout.total_key(key, current));
    args.push(decimal(*cost));
    args.push(ttl_seconds(key.window).to_string());
  }
  ScriptCall {
    script: ScriptName::Write,
    keys,
    args,
  }
}

/// `flush.lua` adding each `(API key, dimension key, bucket, amount)`; every counter must
/// route to one node in a cluster (the caller groups them by pool).
pub fn flush_call(layout: KeyLayout, counters: &[(&str, &DimensionKey, i64, f64)]) -> ScriptCall {
  let mut keys = Vec::with_capacity(counters.len() * 4);
  let mut args = Vec::with_capacity(counters.len() * 3);
  for (api_key_id, key, bucket, amount) in counters {
    keys.push(layout.bucket_key(api_key_id, key, *bucket));
    keys.push(layout.members_key(key, *bucket));
    keys.push(layout.total_key(key, *bucket));
    keys.push(layout.bucket_key(api_key_id, key, bucket - 1));
    // The members set holds the id as the key names carry it (escaped), like write.lua's.
    args.push(id_part(api_key_id).into_owned());
    args.push(decimal(*amount));
    args.push(ttl_seconds(key.window).to_string());
  }
  ScriptCall {
    script: ScriptName::Flush,
    keys,
    args,
  }
}

/// Whose buckets a read group sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Owner {
  /// The id at this index (0-based) of the batch's ids.
  Key(usize),
  /// Every id of the batch plus the dimension's members.
  Pool,
}

/// Up to this many ids, a batch finds an id by scanning them.
const LINEAR_IDS: usize = 16;

/// A `read.lua` call under construction: the ids it knows (usually the pool's
/// allocations) and its groups. Every group of one batch must belong to one pool (in a
/// cluster they share its hash slot).
#[derive(Debug, Clone)]
pub struct ReadBatch {
  pub(crate) layout: KeyLayout,
  totals: PoolTotals,
  prefix_pool: Option<String>,
  ids: Vec<String>,
  /// Filled once there are [`LINEAR_IDS`] ids.
  id_index: HashMap<String, usize>,
  groups: Vec<(DimensionKey, i64, Owner)>,
}

impl ReadBatch {
  /// An empty batch whose pool totals sum `ids` (duplicates are dropped) plus the members
  /// sets ([`PoolTotals::Exact`]), or read the buckets' totals ([`PoolTotals::Aggregate`]:
  /// `ids` is not even iterated).
  pub fn new(layout: KeyLayout, totals: PoolTotals, ids: impl IntoIterator<Item = String>) -> Self {
    let mut batch = ReadBatch {
      layout,
      totals,
      prefix_pool: None,
      ids: Vec::new(),
      id_index: HashMap::new(),
      groups: Vec::new(),
    };
    if totals == PoolTotals::Exact {
      for id in ids {
        batch.id_owned(id);
      }
    }
    batch
  }

  /// The index of `api_key_id` among the ids: a scan while there are few (the hot path's
  /// pools; no hashing, no second copy of each id), the index past [`LINEAR_IDS`].
  fn find(&self, api_key_id: &str) -> Option<usize> {
    if self.ids.len() < LINEAR_IDS {
      self.ids.iter().position(|id| id == api_key_id)
    } else {
      self.id_index.get(api_key_id).copied()
    }
  }

  fn id(&mut self, api_key_id: &str) -> usize {
    match self.find(api_key_id) {
      Some(index) => index,
      None => self.add_id(api_key_id.to_string()),
    }
  }

  fn id_owned(&mut self, api_key_id: String) -> usize {
    match self.find(&api_key_id) {
      Some(index) => index,
      None => self.add_id(api_key_id),
    }
  }

  fn add_id(&mut self, api_key_id: String) -> usize {
    self.ids.push(api_key_id);
    let count = self.ids.len();
    if count == LINEAR_IDS {
      for (index, id) in self.ids.iter().enumerate() {
        self.id_index.insert(id.clone(), index);
      }
    } else if count > LINEAR_IDS {
      self.id_index.insert(self.ids[count - 1].clone(), count - 1);
    }
    count - 1
  }

  fn push(&mut self, key: &DimensionKey, current: i64, owner: Owner) -> usize {
    if self.prefix_pool.is_none() {
      self.prefix_pool = Some(key.pool_id.clone());
    }
    self.groups.push((key.clone(), current, owner));
    self.groups.len() - 1
  }

  /// Reads `api_key_id`'s buckets `current` and `current − 1` of `key`; returns the
  /// group's index in the reply.
  pub fn key(&mut self, api_key_id: &str, key: &DimensionKey, current: i64) -> usize {
    let index = self.id(api_key_id);
    self.push(key, current, Owner::Key(index))
  }

  /// Reads the pool's summed buckets `current` and `current − 1` of `key`; returns the
  /// group's index in the reply.
  pub fn pool(&mut self, key: &DimensionKey, current: i64) -> usize {
    self.push(key, current, Owner::Pool)
  }

  /// Each group's dimension key, current bucket and API key (`None`: the whole pool), in
  /// reply order.
  pub fn groups(&self) -> impl Iterator<Item = (&DimensionKey, i64, Option<&str>)> {
    self.groups.iter().map(|(key, current, owner)| {
      let who = match owner {
        Owner::Key(index) => Some(self.ids[*index].as_str()),
        Owner::Pool => None,
      };
      (key, *current, who)
    })
  }

  /// A hash of what the batch reads (its ids and groups), the counter view's key
  /// (`view.rs`); [`ReadBatch::same_reads`] tells two batches of one hash apart.
  pub fn fingerprint(&self) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = rustc_hash::FxHasher::default();
    self.totals.hash(&mut hasher);
    self.ids.hash(&mut hasher);
    self.groups.hash(&mut hasher);
    hasher.finish()
  }

  /// Whether `other` reads exactly the counters this batch reads.
  pub fn same_reads(&self, other: &ReadBatch) -> bool {
    self.layout == other.layout
      && self.totals == other.totals
      && self.ids == other.ids
      && self.groups == other.groups
  }

  /// The dimension parts of the key names the batch reads (`<pool>:<unit>:<window>`,
  /// escaped as in the names), each once.
  pub fn dimension_parts(&self) -> Vec<String> {
    let mut parts: Vec<String> = Vec::with_capacity(self.groups.len());
    for (key, _, _) in &self.groups {
      let part = dimension_part(key);
      if !parts.contains(&part) {
        parts.push(part);
      }
    }
    parts
  }

  /// How many groups (and so `Buckets` in the reply).
  pub fn len(&self) -> usize {
    self.groups.len()
  }

  /// Whether there is nothing to read.
  pub fn is_empty(&self) -> bool {
    self.groups.is_empty()
  }

  /// The script call. Its reply parses with [`parse_pairs`], one `Buckets` per group.
  pub fn call(&self) -> ScriptCall {
    let prefix = self
      .layout
      .bucket_prefix(self.prefix_pool.as_deref().unwrap_or_default());
    let mut keys: Vec<String> = Vec::new();
    // KEYS positions (1-based) of a current bucket's members set (key groups) and of a
    // (current, previous) pair of them (pool groups), each listed once.
    let mut single: HashMap<String, usize> = HashMap::new();
    let mut pairs: HashMap<String, usize> = HashMap::new();
    let mut totals: HashMap<String, usize> = HashMap::new();
    let mut args = Vec::with_capacity(2 + self.ids.len() + self.groups.len() * 4);
    args.push(prefix);
    args.push(self.ids.len().to_string());
    args.extend(self.ids.iter().map(|id| id_part(id).into_owned()));
    for (key, current, owner) in &self.groups {
      let members = self.layout.members_key(key, *current);
      let who = match owner {
        // Named only so the call always has a key to route by in a cluster.
        Owner::Key(index) => {
          single.entry(members).or_insert_with(|| {
            keys.push(self.layout.members_key(key, *current));
            keys.len()
          });
          (index + 1).to_string()
        }
        Owner::Pool if self.totals == PoolTotals::Aggregate => {
          let total = self.layout.total_key(key, *current);
          let slot = *totals.entry(total).or_insert_with(|| {
            keys.push(self.layout.total_key(key, *current));
            keys.push(self.layout.total_key(key, current - 1));
            keys.len() - 1
          });
          format!("t{slot}")
        }
        Owner::Pool => {
          let slot = *pairs.entry(members).or_insert_with(|| {
            keys.push(self.layout.members_key(key, *current));
            keys.push(self.layout.members_key(key, current - 1));
            keys.len() - 1
          });
          format!("-{slot}")
        }
      };
      args.push(dimension_part(key));
      args.push(current.to_string());
      args.push((current - 1).to_string());
      args.push(who);
    }
    ScriptCall {
      script: ScriptName::Read,
      keys,
      args,
    }
  }
}

/// One compiled check for `reserve.lua`: the read group it compares (0-based), or `None`
/// for a check that always blocks; the weight of the group's previous bucket; the
/// threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScriptCheck {
  pub group: Option<usize>,
  pub prev_weight: f64,
  pub threshold: f64,
}

/// A number as Lua's `tonumber` reads it back exactly (shortest round-trip, exponent
/// form). Only finite values are passed.
fn exact(value: f64) -> String {
  format!("{value:e}")
}

/// A reservation's state as a Redis key keeps it: the key, the state, its TTL (ms).
#[derive(Debug, Clone, PartialEq)]
pub struct KeptState {
  pub key: String,
  pub state: String,
  pub ttl_ms: i64,
}

/// `reserve.lua`: `batch`'s reads, then `checks`, then — when none blocks — each
/// `(dimension key, bucket, amount)` added to `api_key_id`'s buckets and the
/// reservation's state kept. The reply parses with [`parse_reserve`].
pub fn reserve_call(
  batch: &ReadBatch,
  checks: &[ScriptCheck],
  api_key_id: &str,
  writes: &[(DimensionKey, i64, f64)],
  kept: Option<&KeptState>,
) -> ScriptCall {
  let read = batch.call();
  let mut keys = read.keys;
  let mut args = Vec::with_capacity(read.args.len() + 3 + checks.len() * 3 + writes.len() * 2);
  args.push(read.args.len().to_string());
  args.extend(read.args);
  args.push(checks.len().to_string());
  for check in checks {
    // Lua cannot read NaN or ∞ back: a NaN or +∞ threshold never blocks ("-1"), a −∞ one
    // always does ("0").
    let never = check.threshold.is_nan() || check.threshold == f64::INFINITY;
    let always = check.threshold == f64::NEG_INFINITY;
    match check.group {
      _ if never => args.extend(["-1".to_string(), "0".to_string(), "0".to_string()]),
      Some(group) if !always => {
        args.push((group + 1).to_string());
        args.push(exact(check.prev_weight));
        args.push(exact(check.threshold));
      }
      _ => args.extend(["0".to_string(), "0".to_string(), "0".to_string()]),
    }
  }
  args.push(kept.map(|k| k.state.clone()).unwrap_or_default());
  args.push(kept.map_or(0, |k| k.ttl_ms.max(1)).to_string());
  args.push(id_part(api_key_id).into_owned());
  for (key, bucket, amount) in writes {
    keys.push(batch.layout.bucket_key(api_key_id, key, *bucket));
    keys.push(batch.layout.members_key(key, *bucket));
    keys.push(batch.layout.total_key(key, *bucket));
    args.push(decimal(*amount));
    args.push(ttl_seconds(key.window).to_string());
  }
  if let Some(kept) = kept {
    keys.push(kept.key.clone());
  }
  ScriptCall {
    script: ScriptName::Reserve,
    keys,
    args,
  }
}

/// `reserve.lua`'s reply: the index of the first blocking check (`None` when admitted and
/// written), and one `Buckets` per group.
pub fn parse_reserve(
  reply: &[Option<String>],
  groups: usize,
) -> Result<(Option<usize>, Vec<Buckets>)> {
  let Some((first, rest)) = reply.split_first() else {
    return Err(QuotaError::Store(
      "Redis reserve script returned nothing".into(),
    ));
  };
  let blocked = first
    .as_deref()
    .and_then(|t| t.parse::<usize>().ok())
    .ok_or_else(|| QuotaError::Store(format!("Redis reserve script returned {first:?}")))?;
  Ok((
    (blocked > 0).then(|| blocked - 1),
    parse_pairs(rest, groups)?,
  ))
}

/// `settle.lua`: when the reservation key `reservation` still holds `state`, deletes it
/// and adds each `(dimension key, bucket, delta)` to `api_key_id`'s bucket, floored at 0
/// — at most once. Its reply is `["1"]` when it did, `["0"]` when the state was gone.
pub fn settle_call(
  layout: KeyLayout,
  reservation: &str,
  state: &str,
  api_key_id: &str,
  deltas: &[(DimensionKey, i64, f64)],
) -> ScriptCall {
  let mut keys = Vec::with_capacity(1 + deltas.len() * 3);
  let mut args = Vec::with_capacity(2 + deltas.len() * 2);
  keys.push(reservation.to_string());
  args.push(state.to_string());
  args.push(id_part(api_key_id).into_owned());
  for (key, bucket, delta) in deltas {
    keys.push(layout.bucket_key(api_key_id, key, *bucket));
    keys.push(layout.members_key(key, *bucket));
    keys.push(layout.total_key(key, *bucket));
    args.push(decimal(*delta));
    args.push(ttl_seconds(key.window).to_string());
  }
  ScriptCall {
    script: ScriptName::Settle,
    keys,
    args,
  }
}

/// `clear.lua`: `api_key_id`'s buckets `current` and `current − 1` of `key` deleted, their
/// values taken out of the buckets' totals.
pub fn clear_call(
  layout: KeyLayout,
  api_key_id: &str,
  key: &DimensionKey,
  current: i64,
) -> ScriptCall {
  ScriptCall {
    script: ScriptName::Clear,
    keys: vec![
      layout.bucket_key(api_key_id, key, current),
      layout.bucket_key(api_key_id, key, current - 1),
      layout.total_key(key, current),
      layout.total_key(key, current - 1),
    ],
    args: Vec::new(),
  }
}

/// A decimal string from Redis (absent → 0).
fn number(value: Option<&str>) -> Result<f64> {
  match value {
    None => Ok(0.0),
    Some(text) => text
      .trim()
      .parse::<f64>()
      .map_err(|_| QuotaError::Store(format!("Redis returned a non-numeric counter {text:?}"))),
  }
}

/// `[curr, prev, curr, prev, …]` → one `Buckets` per pair; `expected` pairs.
pub fn parse_pairs(reply: &[Option<String>], expected: usize) -> Result<Vec<Buckets>> {
  if reply.len() != expected * 2 {
    return Err(QuotaError::Store(format!(
      "Redis script returned {} values, expected {}",
      reply.len(),
      expected * 2
    )));
  }
  reply
    .chunks(2)
    .map(|pair| {
      Ok(Buckets {
        curr: number(pair[0].as_deref())?,
        prev: number(pair[1].as_deref())?,
      })
    })
    .collect()
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::dimensions::{QuotaUnit, QuotaWindow};

  const H: i64 = 3_600_000;

  fn dim(pool: &str, unit: QuotaUnit, window: QuotaWindow) -> DimensionKey {
    DimensionKey::new(pool, unit, window)
  }

  #[test]
  fn batch_ids_are_kept_once_below_and_past_the_scan_limit() {
    for count in [3, LINEAR_IDS - 1, LINEAR_IDS, LINEAR_IDS + 5, 200] {
      let ids: Vec<String> = (0..count).map(|i| format!("k{i}")).collect();
      let twice = ids.iter().chain(ids.iter()).cloned();
      let mut batch = ReadBatch::new(KeyLayout::Standalone, PoolTotals::Exact, twice);
      assert_eq!(batch.ids, ids, "{count} ids");
      let key = DimensionKey::new(
        "p",
        crate::core::dimensions::QuotaUnit::Requests,
        crate::core::dimensions::QuotaWindow::Hourly,
      );
      for (index, id) in ids.iter().enumerate() {
        batch.key(id, &key, 1);
        assert_eq!(batch.find(id), Some(index));
      }
      batch.key("new", &key, 1);
      assert_eq!(batch.find("new"), Some(count));
      assert_eq!(batch.ids.len(), count + 1);
    }
  }

  #[test]
  fn flush_call_names_a_key_and_its_members_entry_as_write_call_does() {
    // An id with a separator is escaped in the key names; the members set must hold the
    // same escaped id, whichever script wrote the counter.
    let key = DimensionKey::new("p", QuotaUnit::Requests, QuotaWindow::Hourly);
    let now = 10 * QuotaWindow::Hourly.ms();
    let bucket = bucket_index(now, QuotaWindow::Hourly.ms());
    let write = write_call(KeyLayout::Standalone, "a:b%", &[(key.clone(), 1.0)], now);
    let flush = flush_call(KeyLayout::Standalone, &[("a:b%", &key, bucket, 1.0)]);
    assert_eq!(flush.keys[0], write.keys[0]);
    assert_eq!(flush.keys[1], write.keys[2]);
    assert_eq!(flush.keys[2], write.keys[3]);
    assert_eq!(flush.args[0], write.args[0]);
    assert_ne!(flush.args[0], "a:b%");
  }

  #[test]
  fn write_call_lists_four_keys_and_two_args_per_write() {
    let writes = vec![
      (dim("p", QuotaUnit::Requests, QuotaWindow::Hourly), 1.0),
      (dim("p", QuotaUnit::Usd, QuotaWindow::Daily), 0.25),
    ];
    let call = write_call(KeyLayout::Standalone, "k", &writes, 10 * H + 5);
    assert_eq!(call.script, ScriptName::Write);
    assert_eq!(
      call.keys,
      vec![
        "omniroute:quota:k:p:requests:hourly:10",
        "omniroute:quota:k:p:requests:hourly:9",
        "omniroute:quota-members:p:requests:hourly:10",
        "omniroute:quota-total:p:requests:hourly:10",
        "omniroute:quota:k:p:usd:daily:0",
        "omniroute:quota:k:p:usd:daily:-1",
        "omniroute:quota-members:p:usd:daily:0",
        "omniroute:quota-total:p:usd:daily:0",
      ]
    );
    assert_eq!(call.args, vec!["k", "1", "7200", "0.25", "172800"]);
  }

  #[test]
  fn costs_are_exact_decimals() {
    assert_eq!(decimal(0.1), "0.1");
    assert_eq!(decimal(1e-7), "0.0000001");
    assert_eq!(decimal(123456789.5), "123456789.5");
    assert_eq!(decimal(3.0), "3");
  }

  #[test]
  fn read_batch_numbers_ids_and_members_sets() {
    let tokens = dim("pool", QuotaUnit::Tokens, QuotaWindow::Hourly);
    let model = dim("pool:model:m", QuotaUnit::Requests, QuotaWindow::Hourly);
    let mut batch = ReadBatch::new(
      KeyLayout::Cluster,
      PoolTotals::Exact,
      ["a".to_string(), "b".to_string(), "a".to_string()],
    );
    assert_eq!(batch.key("b", &model, 500), 0);
    assert_eq!(batch.key("b", &tokens, 500), 1);
    assert_eq!(batch.pool(&tokens, 500), 2);
    assert_eq!(batch.key("c", &tokens, 500), 3);
    assert_eq!(batch.len(), 4);
    let call = batch.call();
    assert_eq!(call.script, ScriptName::Read);
    assert_eq!(
      call.keys,
      vec![
        "omniroute:quota-members:{pool}:pool:model:m:requests:hourly:500",
        "omniroute:quota-members:{pool}:pool:tokens:hourly:500",
        "omniroute:quota-members:{pool}:pool:tokens:hourly:500",
        "omniroute:quota-members:{pool}:pool:tokens:hourly:499",
      ]
    );
    let expected: Vec<String> = [
      "omniroute:quota:{pool}:",
      "3",
      "a",
      "b",
      "c",
      "pool:model:m:requests:hourly",
      "500",
      "499",
      "2",
      "pool:tokens:hourly",
      "500",
      "499",
      "2",
      "pool:tokens:hourly",
      "500",
      "499",
      "-3",
      "pool:tokens:hourly",
      "500",
      "499",
      "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(call.args, expected);
  }

  #[test]
  fn aggregate_pool_groups_read_the_totals_and_need_no_ids() {
    let tokens = dim("pool", QuotaUnit::Tokens, QuotaWindow::Hourly);
    let ids = (0..10_000).map(|i| format!("k{i}"));
    let mut batch = ReadBatch::new(KeyLayout::Standalone, PoolTotals::Aggregate, ids);
    batch.key("k7", &tokens, 500);
    batch.pool(&tokens, 500);
    batch.pool(&tokens, 500);
    let call = batch.call();
    assert_eq!(
      call.keys,
      vec![
        "omniroute:quota-members:pool:tokens:hourly:500",
        "omniroute:quota-total:pool:tokens:hourly:500",
        "omniroute:quota-total:pool:tokens:hourly:499",
      ]
    );
    // Only the key group's own id is sent: the call's size does not grow with the pool.
    assert_eq!(&call.args[..3], ["omniroute:quota:", "1", "k7"]);
    assert_eq!(call.args[6], "1");
    assert_eq!((&call.args[10][..], &call.args[14][..]), ("t2", "t2"));
    let clear = clear_call(KeyLayout::Standalone, "k", &tokens, 500);
    assert_eq!(clear.script, ScriptName::Clear);
    assert_eq!(
      clear.keys[3],
      "omniroute:quota-total:pool:tokens:hourly:499"
    );
  }

  #[test]
  fn reserve_call_appends_checks_and_writes_to_the_read() {
    let requests = dim("p", QuotaUnit::Requests, QuotaWindow::Hourly);
    let mut batch = ReadBatch::new(KeyLayout::Standalone, PoolTotals::Exact, ["k".to_string()]);
    batch.key("k", &requests, 10);
    batch.pool(&requests, 10);
    let read = batch.call();
    let checks = [
      ScriptCheck {
        group: Some(1),
        prev_weight: 0.25,
        threshold: 100.0,
      },
      ScriptCheck {
        group: None,
        prev_weight: 0.0,
        threshold: 1.0,
      },
      ScriptCheck {
        group: Some(0),
        prev_weight: 0.5,
        threshold: f64::NAN,
      },
    ];
    let kept = KeptState {
      key: "omniroute:quota-reservation:ab".into(),
      state: "{}".into(),
      ttl_ms: 7_200_000,
    };
    let call = reserve_call(
      &batch,
      &checks,
      "k",
      &[(requests.clone(), 10, 1.0)],
      Some(&kept),
    );
    assert_eq!(call.script, ScriptName::Reserve);
    let mut keys = read.keys.clone();
    keys.push("omniroute:quota:k:p:requests:hourly:10".into());
    keys.push("omniroute:quota-members:p:requests:hourly:10".into());
    keys.push("omniroute:quota-total:p:requests:hourly:10".into());
    keys.push("omniroute:quota-reservation:ab".into());
    assert_eq!(call.keys, keys);
    let mut args = vec![read.args.len().to_string()];
    args.extend(read.args);
    args.extend(
      [
        "3", "2", "2.5e-1", "1e2", "0", "0", "0", "-1", "0", "0", "{}", "7200000", "k", "1", "7200",
      ]
      .iter()
      .map(|s| s.to_string()),
    );
    assert_eq!(call.args, args);
  }

  #[test]
  fn settle_call_and_reserve_replies() {
    let tokens = dim("p", QuotaUnit::Tokens, QuotaWindow::Daily);
    let reservation = KeyLayout::Cluster.reservation_key("p", "ab");
    assert_eq!(reservation, "omniroute:quota-reservation:{p}:ab");
    let call = settle_call(
      KeyLayout::Cluster,
      &reservation,
      "{}",
      "k",
      &[(tokens, 3, -0.5)],
    );
    assert_eq!(call.script, ScriptName::Settle);
    assert_eq!(
      call.keys,
      vec![
        "omniroute:quota-reservation:{p}:ab",
        "omniroute:quota:{p}:k:p:tokens:daily:3",
        "omniroute:quota-members:{p}:p:tokens:daily:3",
        "omniroute:quota-total:{p}:p:tokens:daily:3",
      ]
    );
    assert_eq!(call.args, vec!["{}", "k", "-0.5", "172800"]);
    let reply = vec![Some("2".to_string()), Some("4".to_string()), None];
    let (blocked, values) = parse_reserve(&reply, 1).unwrap();
    assert_eq!(blocked, Some(1));
    assert_eq!(values[0].curr, 4.0);
    let (blocked, _) = parse_reserve(&[Some("0".to_string())], 0).unwrap();
    assert_eq!(blocked, None);
    assert!(parse_reserve(&[], 0).is_err());
    assert!(parse_reserve(&[Some("x".to_string())], 0).is_err());
  }

  #[test]
  fn replies_parse_in_pairs() {
    let reply = vec![
      Some("3.5".to_string()),
      None,
      Some("0.10000000000000001".to_string()),
      Some("1e+20".to_string()),
    ];
    let values = parse_pairs(&reply, 2).unwrap();
    assert_eq!(
      values,
      vec![
        Buckets {
          curr: 3.5,
          prev: 0.0
        },
        Buckets {
          curr: 0.1,
          prev: 1e20
        },
      ]
    );
    assert!(parse_pairs(&reply, 3).is_err());
    assert!(parse_pairs(&[Some("abc".into()), None], 1).is_err());
  }
}
