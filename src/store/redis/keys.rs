//! Redis key names and TTLs (docs/contract.md §4, Redis).
//!
//! - A bucket: `omniroute:quota:<apiKeyId>:<dimensionKey>:<bucketIndex>`, value a decimal
//!   string (INCRBYFLOAT's), TTL `ceil(2 × windowMs / 1000)` s — exactly the host's
//!   TypeScript driver's names, so replicas running either read each other's counters.
//! - The members of a bucket: `omniroute:quota-members:<dimensionKey>:<bucketIndex>`, a set
//!   of the API key ids this engine wrote into that bucket (same TTL, so it lives exactly as
//!   long as the buckets it lists). Pool totals sum the pool's allocations (from SQLite)
//!   plus the members of the current and previous buckets, so a key that consumed without
//!   an allocation still counts, as on SQLite. The TypeScript driver does not write the
//!   set; its keys are counted through the allocations.
//! - The total of a bucket: `omniroute:quota-total:<dimensionKey>:<bucketIndex>`, the sum
//!   of every key's bucket this engine wrote (same TTL, refreshed by every write), kept by
//!   the write scripts in one INCRBYFLOAT. Pool totals read it in constant time when
//!   `QUOTA_STORE_REDIS_POOL_TOTALS=aggregate` ([`PoolTotals`], docs/redis.md#pool-totals).
//! - Cluster layout (opt-in): every key of one pool carries the hash tag `{<pool>}` right
//!   after the prefix — `omniroute:quota:{<pool>}:<apiKeyId>:<dimensionKey>:<bucketIndex>`
//!   and `omniroute:quota-members:{<pool>}:<dimensionKey>:<bucketIndex>` — so all the keys one script
//!   touches share a slot. `<pool>` is the dimension key's pool id up to `:model:` (a
//!   model-cap bucket lives with its pool), with `%` and `}` percent-escaped.

use crate::core::dimensions::{DimensionKey, QuotaWindow};

/// The prefix of every bucket key.
pub const BUCKET_PREFIX: &str = "omniroute:quota:";
/// The prefix of every members set.
pub const MEMBERS_PREFIX: &str = "omniroute:quota-members:";
/// The prefix of every bucket total.
pub const TOTAL_PREFIX: &str = "omniroute:quota-total:";

/// How pool totals are read (`QUOTA_STORE_REDIS_POOL_TOTALS`, docs/redis.md#pool-totals).
/// The write scripts keep the totals in both modes, so switching is safe at any time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolTotals {
  /// The sum of every allocation's buckets plus the members sets' (linear in the pool's
  /// keys): exact beside replicas running the host's TypeScript driver, which do not keep
  /// the totals. The default.
  #[default]
  Exact,
  /// The buckets' totals (two GETs per dimension, whatever the pool's size): exact when
  /// every replica runs the engine.
  Aggregate,
}

/// Which key names a server gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyLayout {
  /// One server (or a proxy in front of several): the host's exact key names.
  Standalone,
  /// Redis Cluster: the names carry a per-pool hash tag.
  Cluster,
}

/// The pool a dimension key's pool id belongs to: model-cap dimension keys
/// (`"<pool>:model:<model>"`) belong to `<pool>`.
pub fn base_pool_id(pool_id: &str) -> &str {
  pool_id
    .find(":model:")
    .map_or(pool_id, |index| &pool_id[..index])
}

/// The cluster hash tag's content for a pool id: the base pool id with `%` and `}`
/// escaped (a `}` would end the tag early).
pub fn hash_tag(pool_id: &str) -> String {
  let base = base_pool_id(pool_id);
  let mut tag = String::with_capacity(base.len() + 2);
  for c in base.chars() {
    match c {
      '%' => tag.push_str("%25"),
      '}' => tag.push_str("%7D"),
      c => tag.push(c),
    }
  }
  tag
}

/// `ceil(2 × windowMs / 1000)` seconds: a bucket lives while it can still be `prev`.
pub fn ttl_seconds(window: QuotaWindow) -> i64 {
  (2 * window.ms() + 999) / 1000
}

impl KeyLayout {
  /// What precedes `<apiKeyId>` in every bucket key of `pool_id`.
  pub fn bucket_prefix(self, pool_id: &str) -> String {
    match self {
      KeyLayout::Standalone => BUCKET_PREFIX.to_string(),
      KeyLayout::Cluster => format!("{BUCKET_PREFIX}{{{}}}:", hash_tag(pool_id)),
    }
  }

  /// The key of one bucket.
  pub fn bucket_key(self, api_key_id: &str, key: &DimensionKey, bucket: i64) -> String {
    format!(
      "{}{api_key_id}:{key}:{bucket}",
      self.bucket_prefix(&key.pool_id)
    )
  }

  /// The set of API key ids written into bucket `bucket` of `key`.
  pub fn members_key(self, key: &DimensionKey, bucket: i64) -> String {
    self.per_bucket(MEMBERS_PREFIX, key, bucket)
  }

  /// The sum of every key's bucket `bucket` of `key` the engine wrote.
  pub fn total_key(self, key: &DimensionKey, bucket: i64) -> String {
    self.per_bucket(TOTAL_PREFIX, key, bucket)
  }

  fn per_bucket(self, prefix: &str, key: &DimensionKey, bucket: i64) -> String {
    match self {
      KeyLayout::Standalone => format!("{prefix}{key}:{bucket}"),
      KeyLayout::Cluster => format!("{prefix}{{{}}}:{key}:{bucket}", hash_tag(&key.pool_id)),
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::dimensions::QuotaUnit;

  fn dim(pool: &str) -> DimensionKey {
    DimensionKey::new(pool, QuotaUnit::Tokens, QuotaWindow::Daily)
  }

  #[test]
  fn standalone_names_are_the_hosts() {
    let layout = KeyLayout::Standalone;
    assert_eq!(
      layout.bucket_key("key-1", &dim("pool-9"), 20_000),
      "omniroute:quota:key-1:pool-9:tokens:daily:20000"
    );
    assert_eq!(
      layout.bucket_key("k", &dim("p"), -1),
      "omniroute:quota:k:p:tokens:daily:-1"
    );
    assert_eq!(
      layout.members_key(&dim("pool-9"), 20_000),
      "omniroute:quota-members:pool-9:tokens:daily:20000"
    );
    assert_eq!(layout.bucket_prefix("anything"), "omniroute:quota:");
    assert_eq!(
      layout.total_key(&dim("pool-9"), 20_000),
      "omniroute:quota-total:pool-9:tokens:daily:20000"
    );
  }

  #[test]
  fn cluster_names_carry_the_pool_tag() {
    let layout = KeyLayout::Cluster;
    assert_eq!(
      layout.bucket_key("key-1", &dim("pool-9"), 7),
      "omniroute:quota:{pool-9}:key-1:pool-9:tokens:daily:7"
    );
    assert_eq!(
      layout.members_key(&dim("pool-9"), 7),
      "omniroute:quota-members:{pool-9}:pool-9:tokens:daily:7"
    );
    assert_eq!(
      layout.total_key(&dim("pool-9"), 7),
      "omniroute:quota-total:{pool-9}:pool-9:tokens:daily:7"
    );
    // A model-cap bucket shares its pool's tag, so one script can read both.
    let model = DimensionKey::new(
      "pool-9:model:gpt-x",
      QuotaUnit::Requests,
      QuotaWindow::Hourly,
    );
    assert_eq!(
      layout.bucket_key("key-1", &model, 3),
      "omniroute:quota:{pool-9}:key-1:pool-9:model:gpt-x:requests:hourly:3"
    );
  }

  #[test]
  fn tags_escape_what_would_break_them() {
    assert_eq!(hash_tag("a}b%c{d"), "a%7Db%25c{d");
    assert_eq!(hash_tag("p:model:m}"), "p");
    assert_eq!(base_pool_id("p"), "p");
    assert_eq!(base_pool_id("p:model:a:model:b"), "p");
  }

  #[test]
  fn ttl_is_twice_the_window_rounded_up() {
    assert_eq!(ttl_seconds(QuotaWindow::Hourly), 7_200);
    assert_eq!(ttl_seconds(QuotaWindow::FiveHours), 36_000);
    assert_eq!(ttl_seconds(QuotaWindow::Daily), 172_800);
    assert_eq!(ttl_seconds(QuotaWindow::Weekly), 1_209_600);
    assert_eq!(ttl_seconds(QuotaWindow::Monthly), 5_184_000);
  }
}
