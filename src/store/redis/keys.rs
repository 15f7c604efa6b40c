//! Redis key names and TTLs (docs/redis.md#keys). On one server they are exactly the host's
//! TypeScript driver's names, so replicas running either read each other's counters; in a
//! cluster every key of one pool carries the hash tag `{<pool>}` right after the prefix, so
//! all the keys one script touches share a slot. An id with `:` or `%` is escaped, each
//! part on its own, so no two distinct counters share a name (docs/redis.md#key-names).

use crate::core::dimensions::{DimensionKey, QuotaWindow};
use std::borrow::Cow;

/// The prefix of every bucket key.
pub const BUCKET_PREFIX: &str = "omniroute:quota:";
/// The prefix of every members set: the API key ids this engine wrote into a bucket, so
/// that exact pool totals count a key that consumed without an allocation (the host's
/// driver does not write them; its keys count through the allocations).
pub const MEMBERS_PREFIX: &str = "omniroute:quota-members:";
/// The prefix of every bucket total: the sum of every key's bucket this engine wrote.
pub const TOTAL_PREFIX: &str = "omniroute:quota-total:";
/// The prefix of a reservation's state (reserve admission, docs/admission.md).
pub const RESERVATION_PREFIX: &str = "omniroute:quota-reservation:";
/// The prefix of the last flush of a process's write-behind buffer that Redis applied
/// (docs/redis.md#write-behind): a flush sent again after a timeout is applied once.
pub const FLUSHED_PREFIX: &str = "omniroute:quota-flushed:";

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

  /// The id of the last flush of `writer` (a process) applied to `pool_id`'s slot.
  pub fn flushed_key(self, pool_id: &str, writer: &str) -> String {
    format!("{FLUSHED_PREFIX}{}{writer}", self.tag(pool_id))
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
  // The names themselves are checked against a server: `tests/fuzz.rs`
  // (`fuzz_redis_names_are_injective`) and `__test__/redis-store.test.mjs`,
  // `redis-cluster.test.mjs`, `redis-pool-totals.test.mjs`.
  use super::*;
  use crate::core::dimensions::QuotaUnit;

  #[test]
  fn escapes_keep_tags_and_name_parts_whole() {
    assert_eq!(hash_tag("a}b%c{d"), "a%7Db%25c{d");
    assert_eq!(hash_tag("p:model:m}"), "p");
    assert_eq!(base_pool_id("p:model:a:model:b"), "p");
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
