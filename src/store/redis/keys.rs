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
//! - Ids in names (docs/redis.md#key-names): `:` separates the parts of a name, so an API
//!   key id, a pool id or a model that contains `:` or `%` is written with those two
//!   characters percent-escaped (`%3A`, `%25`), each part on its own — `<pool>:model:<m>`
//!   keeps its `:model:` — so no two distinct (key, pool, unit, window, bucket) share a
//!   name. An id without `:` or `%` is written as it is: the host's names, unchanged.

use crate::core::dimensions::{DimensionKey, QuotaWindow};
use std::borrow::Cow;

/// The prefix of every bucket key.
pub const BUCKET_PREFIX: &str = "omniroute:quota:";
/// The prefix of every members set.
pub const MEMBERS_PREFIX: &str = "omniroute:quota-members:";
/// The prefix of every bucket total.
pub const TOTAL_PREFIX: &str = "omniroute:quota-total:";

/// How pool totals are read (`QUOTA_STORE_REDIS_POOL_TOTALS`, docs/redis.md#pool-totals).
/// The write scripts keep the totals in both modes, so switching is safe at any time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
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
/// The prefix of a reservation's state (reserve admission, docs/admission.md).
pub const RESERVATION_PREFIX: &str = "omniroute:quota-reservation:";

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

/// `text` with `%` and `special` percent-escaped (`special` is `:` in a name's parts, `}`
/// in a hash tag); borrowed when it has neither, as every id of the host's names.
fn escape(text: &str, special: char) -> Cow<'_, str> {
  if !text.contains(['%', special]) {
    return Cow::Borrowed(text);
  }
  let mut out = String::with_capacity(text.len() + 8);
  for c in text.chars() {
    match c {
      '%' => out.push_str("%25"),
      c if c == special => out.push_str(&format!("%{:02X}", c as u32)),
      c => out.push(c),
    }
  }
  Cow::Owned(out)
}

/// The cluster hash tag's content for a pool id: the base pool id with `%` and `}`
/// escaped (a `}` would end the tag early).
pub fn hash_tag(pool_id: &str) -> Cow<'_, str> {
  escape(base_pool_id(pool_id), '}')
}

/// One id as a part of a key name: `%` → `%25`, `:` → `%3A`.
pub fn id_part(id: &str) -> Cow<'_, str> {
  escape(id, ':')
}

/// A dimension key as a part of a key name: `<pool>:<unit>:<window>`, or
/// `<pool>:model:<model>:<unit>:<window>` for a model-cap bucket (split at the first
/// `:model:`, as [`base_pool_id`] does), each id part escaped by [`id_part`].
pub fn dimension_part(key: &DimensionKey) -> String {
  let pool = match key.pool_id.split_once(":model:") {
    Some((pool, model)) => format!("{}:model:{}", id_part(pool), id_part(model)),
    None => id_part(&key.pool_id).into_owned(),
  };
  format!("{pool}:{}:{}", key.unit, key.window)
}

/// `ceil(2 × windowMs / 1000)` seconds: a bucket lives while it can still be `prev`.
pub fn ttl_seconds(window: QuotaWindow) -> i64 {
  (2 * window.ms() + 999) / 1000
}

impl KeyLayout {
  /// What follows a prefix in every key of `pool_id`: nothing, or in a cluster the hash tag.
  fn tag(self, pool_id: &str) -> String {
    match self {
      KeyLayout::Standalone => String::new(),
      KeyLayout::Cluster => format!("{{{}}}:", hash_tag(pool_id)),
    }
  }

  /// What precedes `<apiKeyId>` in every bucket key of `pool_id`.
  pub fn bucket_prefix(self, pool_id: &str) -> String {
    format!("{BUCKET_PREFIX}{}", self.tag(pool_id))
  }

  /// The key of one bucket.
  pub fn bucket_key(self, api_key_id: &str, key: &DimensionKey, bucket: i64) -> String {
    format!(
      "{}{}:{}:{bucket}",
      self.bucket_prefix(&key.pool_id),
      id_part(api_key_id),
      dimension_part(key)
    )
  }

  /// The state of reservation `id`, made in pool `pool_id` (in a cluster it shares the
  /// pool's slot, so the scripts that make and settle it touch one slot).
  pub fn reservation_key(self, pool_id: &str, id: &str) -> String {
    format!("{RESERVATION_PREFIX}{}{id}", self.tag(pool_id))
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
    let tag = self.tag(&key.pool_id);
    format!("{prefix}{tag}{}:{bucket}", dimension_part(key))
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

  /// Issue 15 item 5: key `k` in pool `x:p` and key `k:x` in pool `p` were both
  /// `omniroute:quota:k:x:p:…`.
  #[test]
  fn ids_with_separators_never_share_a_name() {
    for layout in [KeyLayout::Standalone, KeyLayout::Cluster] {
      assert_ne!(
        layout.bucket_key("k", &dim("x:p"), 1),
        layout.bucket_key("k:x", &dim("p"), 1)
      );
      assert_eq!(
        KeyLayout::Standalone.bucket_key("k:x", &dim("p%3A"), 1),
        "omniroute:quota:k%3Ax:p%253A:tokens:daily:1"
      );
    }
    // A model part keeps its `:model:`; a model with a `:` is escaped on its own.
    let model = DimensionKey::new("p:model:gpt:4", QuotaUnit::Tokens, QuotaWindow::Daily);
    assert_eq!(
      KeyLayout::Standalone.members_key(&model, 2),
      "omniroute:quota-members:p:model:gpt%3A4:tokens:daily:2"
    );
    assert_eq!(id_part("plain-id_1.x"), Cow::Borrowed("plain-id_1.x"));
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
