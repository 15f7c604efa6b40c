//! The Lua scripts every counter operation goes through, and their arguments.
//!
//! Building a call is pure (keys and arguments as strings, unit-tested here); running it
//! is `connection.rs`'s. Scripts are called by SHA (EVALSHA) and loaded once per server
//! (SCRIPT LOAD on the first NOSCRIPT reply, after a restart or a `SCRIPT FLUSH`). What
//! each one takes and answers is said at the top of its file in `lua/`.

use super::keys::{dimension_part, id_part, ttl_seconds, KeyLayout, PoolTotals};
use crate::core::admission::{AdmissionCheck, CheckSide, Reservation};
use crate::core::dimensions::{bucket_index, DimensionKey};
use crate::core::enforce::Buckets;
use crate::error::{QuotaError, Result};
use redis::Script;
use std::collections::HashMap;
use std::sync::LazyLock;

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
    // In the order of the variants, which index it.
    static SCRIPTS: LazyLock<[Script; 6]> = LazyLock::new(|| {
      let groups = include_str!("lua/groups.lua");
      let checks = include_str!("lua/checks.lua");
      [
        Script::new(&format!("{checks}{}", include_str!("lua/write.lua"))),
        Script::new(&format!("{groups}{}", include_str!("lua/read.lua"))),
        Script::new(&format!(
          "{checks}{groups}{}",
          include_str!("lua/reserve.lua")
        )),
        Script::new(&format!("{checks}{}", include_str!("lua/settle.lua"))),
        Script::new(include_str!("lua/clear.lua")),
        Script::new(&format!("{checks}{}", include_str!("lua/flush.lua"))),
      ]
    });
    &SCRIPTS[self as usize]
  }
}

/// One script invocation: `EVALSHA <sha> <keys.len()> keys… args…`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptCall {
  pub script: ScriptName,
  pub keys: Vec<String>,
  pub args: Vec<String>,
}

impl ScriptCall {
  fn new(script: ScriptName) -> Self {
    ScriptCall {
      script,
      keys: Vec::new(),
      args: Vec::new(),
    }
  }

  /// One write of `amount` to `api_key_id`'s bucket `bucket` of `key`, as every writing
  /// script takes it: the bucket, its members set and its total; the amount and the TTL.
  pub(crate) fn add(
    &mut self,
    layout: KeyLayout,
    api_key_id: &str,
    key: &DimensionKey,
    bucket: i64,
    amount: f64,
  ) {
    self.keys.extend([
      layout.bucket_key(api_key_id, key, bucket),
      layout.members_key(key, bucket),
      layout.total_key(key, bucket),
    ]);
    self
      .args
      .extend([decimal(amount), ttl_seconds(key.window).to_string()]);
  }
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
  let mut call = ScriptCall::new(ScriptName::Write);
  call.args.push(id_part(api_key_id).into_owned());
  for (key, cost) in writes {
    let current = bucket_index(now_ms, key.window.ms());
    call.add(layout, api_key_id, key, current, *cost);
    call
      .keys
      .push(layout.bucket_key(api_key_id, key, current - 1));
  }
  call
}

/// `flush.lua` adding each `(API key, dimension key, bucket, amount)`, as flush `flush_id`
/// of `writer`; every counter must route to one node in a cluster (the caller groups them
/// by pool).
pub fn flush_call<'a>(
  layout: KeyLayout,
  (writer, flush_id): (&str, u64),
  counters: impl IntoIterator<Item = (&'a str, &'a DimensionKey, i64, f64)>,
) -> ScriptCall {
  let mut call = ScriptCall::new(ScriptName::Flush);
  let mut pool = None;
  for (api_key_id, key, bucket, amount) in counters {
    call.add(layout, api_key_id, key, bucket, amount);
    // The members set holds the id as the key names carry it (escaped), like write.lua's.
    call.args.push(id_part(api_key_id).into_owned());
    pool.get_or_insert(&key.pool_id);
  }
  call
    .keys
    .push(layout.flushed_key(pool.map_or("", |p| p), writer));
  call.args.push(flush_id.to_string());
  call
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
      ids: Vec::new(),
      id_index: HashMap::new(),
      groups: Vec::new(),
    };
    if totals == PoolTotals::Exact {
      for id in ids {
        batch.id(id);
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

  /// The index of `api_key_id`, added when new (copied only then).
  fn id(&mut self, api_key_id: impl AsRef<str> + Into<String>) -> usize {
    if let Some(index) = self.find(api_key_id.as_ref()) {
      return index;
    }
    self.ids.push(api_key_id.into());
    let count = self.ids.len();
    if count >= LINEAR_IDS {
      let from = if count == LINEAR_IDS { 0 } else { count - 1 };
      for (index, id) in self.ids.iter().enumerate().skip(from) {
        self.id_index.insert(id.clone(), index);
      }
    }
    count - 1
  }

  fn push(&mut self, key: &DimensionKey, current: i64, owner: Owner) -> usize {
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
    let layout = self.layout;
    let mut call = ScriptCall::new(ScriptName::Read);
    // The KEYS position (1-based) of each key, or first of a pair, listed once: a current
    // bucket's members set (key groups, named only so that a cluster routes the call), a
    // (current, previous) pair of members sets or of totals (pool groups).
    let mut listed: HashMap<(char, String), usize> = HashMap::new();
    let pool = self
      .groups
      .first()
      .map_or("", |(key, _, _)| key.pool_id.as_str());
    let prefix = layout.bucket_prefix(pool);
    call.args.extend([prefix, self.ids.len().to_string()]);
    call
      .args
      .extend(self.ids.iter().map(|id| id_part(id).into_owned()));
    for (key, current, owner) in &self.groups {
      let (kind, names) = match owner {
        Owner::Key(_) => ('k', vec![layout.members_key(key, *current)]),
        Owner::Pool if self.totals == PoolTotals::Aggregate => (
          't',
          vec![
            layout.total_key(key, *current),
            layout.total_key(key, current - 1),
          ],
        ),
        Owner::Pool => (
          '-',
          vec![
            layout.members_key(key, *current),
            layout.members_key(key, current - 1),
          ],
        ),
      };
      let width = names.len();
      let slot = *listed.entry((kind, names[0].clone())).or_insert_with(|| {
        call.keys.extend(names);
        call.keys.len() + 1 - width
      });
      let who = match owner {
        Owner::Key(index) => (index + 1).to_string(),
        Owner::Pool => format!("{kind}{slot}"),
      };
      call.args.extend([
        dimension_part(key),
        current.to_string(),
        (current - 1).to_string(),
        who,
      ]);
    }
    call
  }
}

/// A number as Lua's `tonumber` reads it back exactly (shortest round-trip, exponent
/// form). Only finite values are passed.
fn exact(value: f64) -> String {
  format!("{value:e}")
}

/// `reserve.lua`: `batch`'s reads, then `checks` at `now_ms`, then — when none blocks —
/// `reservation`'s additions written and its state kept. The reply parses with
/// [`parse_reserve`].
pub fn reserve_call(
  batch: &ReadBatch,
  checks: &[AdmissionCheck],
  reservation: Option<&Reservation>,
  now_ms: i64,
) -> ScriptCall {
  let read = batch.call();
  let mut call = ScriptCall::new(ScriptName::Reserve);
  call.keys = read.keys;
  call.args.push(read.args.len().to_string());
  call.args.extend(read.args);
  call.args.push(checks.len().to_string());
  for check in checks {
    // Lua cannot read NaN or ∞ back: a NaN or +∞ threshold never blocks ("-1"), a −∞ one
    // always does ("0").
    let never = check.threshold.is_nan() || check.threshold == f64::INFINITY;
    let always = check.threshold == f64::NEG_INFINITY;
    call.args.extend(match check.side {
      _ if never => ["-1".into(), "0".into(), "0".into()],
      CheckSide::Read(group) if !always => [
        (group + 1).to_string(),
        exact(check.prev_weight(now_ms)),
        exact(check.threshold),
      ],
      _ => ["0".into(), "0".into(), "0".into()],
    });
  }
  let Some(reservation) = reservation else {
    call.args.extend([String::new(), "0".into(), String::new()]);
    return call;
  };
  call.args.extend([
    reservation.state(),
    (reservation.expires_at(now_ms) - now_ms).max(1).to_string(),
    id_part(&reservation.api_key_id).into_owned(),
  ]);
  for (key, bucket, amount) in reservation.additions() {
    call.add(batch.layout, &reservation.api_key_id, &key, bucket, amount);
  }
  let state_key = batch
    .layout
    .reservation_key(reservation.pool_id(), &reservation.id);
  call.keys.push(state_key);
  call
}

/// `reserve.lua`'s reply: the index of the first blocking check (`None` when admitted and
/// written), and one `Buckets` per group.
pub fn parse_reserve(reply: &[Option<String>], groups: usize) -> Result<Reserved> {
  let Some((first, rest)) = reply.split_first() else {
    return Err(QuotaError::Store(
      "Redis reserve script returned nothing".into(),
    ));
  };
  let blocked = first
    .as_deref()
    .and_then(|t| t.parse::<usize>().ok())
    .ok_or_else(|| QuotaError::Store(format!("Redis reserve script returned {first:?}")))?;
  let (pairs, skipped) = rest.split_at(rest.len().min(2 * groups));
  Ok(Reserved {
    blocked: (blocked > 0).then(|| blocked - 1),
    values: parse_pairs(pairs, groups)?,
    skipped: skipped.iter().flatten().cloned().collect(),
  })
}

/// What `reserve.lua` answered.
#[derive(Debug)]
pub struct Reserved {
  /// The first blocking check, when one blocked.
  pub blocked: Option<usize>,
  /// Each group's summed buckets.
  pub values: Vec<Buckets>,
  /// The buckets of the counters it skipped (a key holds another type or not a number).
  pub skipped: Vec<String>,
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
  let mut call = ScriptCall::new(ScriptName::Settle);
  call.keys.push(reservation.to_string());
  call
    .args
    .extend([state.to_string(), id_part(api_key_id).into_owned()]);
  for (key, bucket, delta) in deltas {
    call.add(layout, api_key_id, key, *bucket, *delta);
  }
  call
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
  // What the scripts do with these calls is checked against a server by the store suite
  // (`__test__/store-suite.test.mjs`) and `__test__/redis-*.test.mjs`.
  use super::*;
  use crate::core::dimensions::{QuotaUnit, QuotaWindow};

  const H: i64 = 3_600_000;

  /// The words of `text`, for the expected keys and arguments of a call.
  fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
  }

  #[test]
  fn batch_ids_are_kept_once_below_and_past_the_scan_limit() {
    let key = DimensionKey::new("p", QuotaUnit::Requests, QuotaWindow::Hourly);
    for count in [3, LINEAR_IDS - 1, LINEAR_IDS, LINEAR_IDS + 5, 200] {
      let ids: Vec<String> = (0..count).map(|i| format!("k{i}")).collect();
      let twice = ids.iter().chain(ids.iter()).cloned();
      let mut batch = ReadBatch::new(KeyLayout::Standalone, PoolTotals::Exact, twice);
      assert_eq!(batch.ids, ids, "{count} ids");
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
    let write = write_call(KeyLayout::Standalone, "a:b%", &[(key.clone(), 1.0)], 10 * H);
    let flush = flush_call(KeyLayout::Standalone, ("w", 1), [("a:b%", &key, 10, 1.0)]);
    assert_eq!(flush.keys[..3], write.keys[..3]);
    assert_eq!(flush.args, ["1", "7200", "a%3Ab%25", "1"]);
    assert_eq!(flush.args[2], write.args[0]);
  }

  #[test]
  fn costs_are_exact_decimals() {
    assert_eq!(decimal(0.1), "0.1");
    assert_eq!(decimal(1e-7), "0.0000001");
    assert_eq!(decimal(123456789.5), "123456789.5");
    assert_eq!(decimal(3.0), "3");
  }

  #[test]
  fn read_batch_numbers_ids_and_lists_each_key_once() {
    let tokens = DimensionKey::new("pool", QuotaUnit::Tokens, QuotaWindow::Hourly);
    let model = DimensionKey::new("pool:model:m", QuotaUnit::Requests, QuotaWindow::Hourly);
    let ids = ["a", "b", "a"].map(String::from);
    let mut batch = ReadBatch::new(KeyLayout::Cluster, PoolTotals::Exact, ids);
    assert_eq!(batch.key("b", &model, 500), 0);
    assert_eq!(batch.key("b", &tokens, 500), 1);
    assert_eq!(batch.pool(&tokens, 500), 2);
    assert_eq!(batch.key("c", &tokens, 500), 3);
    assert_eq!(batch.pool(&tokens, 500), 4);
    let call = batch.call();
    assert_eq!(call.script, ScriptName::Read);
    let members = "omniroute:quota-members:{pool}:pool";
    assert_eq!(
      call.keys,
      [
        format!("{members}:model:m:requests:hourly:500"),
        format!("{members}:tokens:hourly:500"),
        format!("{members}:tokens:hourly:500"),
        format!("{members}:tokens:hourly:499"),
      ]
    );
    let args = words(
      "omniroute:quota:{pool}: 3 a b c
       pool:model:m:requests:hourly 500 499 2   pool:tokens:hourly 500 499 2
       pool:tokens:hourly 500 499 -3   pool:tokens:hourly 500 499 3
       pool:tokens:hourly 500 499 -3",
    );
    assert_eq!(call.args, args);
    // Aggregate: a pool group reads the two totals, and only a key group's own id is sent.
    let many = (0..10_000).map(|i| format!("k{i}"));
    let mut batch = ReadBatch::new(KeyLayout::Standalone, PoolTotals::Aggregate, many);
    batch.key("k7", &tokens, 500);
    batch.pool(&tokens, 500);
    let call = batch.call();
    assert_eq!(
      call.keys[1..],
      words(
        "omniroute:quota-total:pool:tokens:hourly:500 omniroute:quota-total:pool:tokens:hourly:499"
      )
    );
    assert_eq!(call.args[..3], ["omniroute:quota:", "1", "k7"]);
    assert_eq!(call.args[10], "t2");
  }

  #[test]
  fn reserve_call_appends_checks_and_writes_to_the_read() {
    let requests = DimensionKey::new("p", QuotaUnit::Requests, QuotaWindow::Hourly);
    let mut batch = ReadBatch::new(KeyLayout::Standalone, PoolTotals::Exact, ["k".to_string()]);
    batch.key("k", &requests, 10);
    batch.pool(&requests, 10);
    let read = batch.call();
    let check = |side, threshold| AdmissionCheck {
      side,
      window_ms: H,
      threshold,
      reason: crate::core::enforce::BlockReason::FairShare,
    };
    let checks = [
      check(CheckSide::Read(1), 100.0),
      check(CheckSide::Always, 1.0),
      check(CheckSide::Read(0), f64::NAN),
      check(CheckSide::Read(0), f64::NEG_INFINITY),
    ];
    let now = 10 * H + 3 * H / 4;
    let reservation = Reservation::new("ab".into(), "k", vec![(requests.clone(), 1.0)], now);
    let call = reserve_call(&batch, &checks, Some(&reservation), now);
    assert_eq!(call.script, ScriptName::Reserve);
    let mut keys = read.keys.clone();
    keys.extend(words(
      "omniroute:quota:k:p:requests:hourly:10 omniroute:quota-members:p:requests:hourly:10
       omniroute:quota-total:p:requests:hourly:10 omniroute:quota-reservation:ab",
    ));
    assert_eq!(call.keys, keys);
    let mut args = vec![read.args.len().to_string()];
    args.extend(read.args);
    // Per check: its group, the previous bucket's weight, the threshold ("-1": never
    // blocks, "0": always); then the state and its TTL, the id, a write's amount and TTL.
    args.extend(words("4  2 2.5e-1 1e2  0 0 0  -1 0 0  0 0 0"));
    args.push(reservation.state());
    args.extend(words("7200000 k 1 7200"));
    assert_eq!(call.args, args);
  }

  #[test]
  fn settle_call_and_reserve_replies() {
    let tokens = DimensionKey::new("p", QuotaUnit::Tokens, QuotaWindow::Daily);
    let reservation = KeyLayout::Cluster.reservation_key("p", "ab");
    let call = settle_call(
      KeyLayout::Cluster,
      &reservation,
      "{}",
      "k",
      &[(tokens, 3, -0.5)],
    );
    assert_eq!(call.script, ScriptName::Settle);
    let keys = words(
      "omniroute:quota-reservation:{p}:ab omniroute:quota:{p}:k:p:tokens:daily:3
       omniroute:quota-members:{p}:p:tokens:daily:3 omniroute:quota-total:{p}:p:tokens:daily:3",
    );
    assert_eq!(call.keys, keys);
    assert_eq!(call.args, ["{}", "k", "-0.5", "172800"]);
    let reply = [Some("2".to_string()), Some("4".to_string()), None];
    let reserved = parse_reserve(&reply, 1).unwrap();
    assert_eq!((reserved.blocked, reserved.values[0].curr), (Some(1), 4.0));
    let reply = ["0", "1", "0", "omniroute:quota:k:p:tokens:daily:3"].map(|t| Some(t.to_string()));
    let reserved = parse_reserve(&reply, 1).unwrap();
    assert_eq!(reserved.skipped, ["omniroute:quota:k:p:tokens:daily:3"]);
    assert_eq!(
      parse_reserve(&[Some("0".to_string())], 0).unwrap().blocked,
      None
    );
    assert!(parse_reserve(&[], 0).is_err());
    assert!(parse_reserve(&[Some("x".to_string())], 0).is_err());
  }

  #[test]
  fn replies_parse_in_pairs() {
    let reply =
      ["3.5", "", "0.10000000000000001", "1e+20"].map(|v| (!v.is_empty()).then(|| v.to_string()));
    let values = parse_pairs(&reply, 2).unwrap();
    let pairs: Vec<(f64, f64)> = values.iter().map(|b| (b.curr, b.prev)).collect();
    assert_eq!(pairs, [(3.5, 0.0), (0.1, 1e20)]);
    assert!(parse_pairs(&reply, 3).is_err());
    assert!(parse_pairs(&[Some("abc".into()), None], 1).is_err());
  }
}
