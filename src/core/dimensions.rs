//! Vocabulary of docs/contract.md §1 (units, windows, policies, dimensions and keys) and
//! the two-bucket sliding-window counter of §2.

use std::fmt;

/// An enum whose variants have names in the contract: `ALL` (in declaration order),
/// `as_str`, `parse` (exact, case-sensitive) and `Display`; with `as "noun"`, also
/// `parse_field`, which fails with a `RangeError` naming the field and the names.
macro_rules! named_enum {
  ($(#[$meta:meta])* pub enum $name:ident { $($variant:ident = $text:literal,)+ }) => {
    $(#[$meta])*
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum $name {
      $($variant,)+
    }

    impl $name {
      pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

      pub fn as_str(self) -> &'static str {
        match self {
          $($name::$variant => $text,)+
        }
      }

      pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
      }
    }

    impl std::fmt::Display for $name {
      fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
      }
    }
  };
  ($(#[$meta:meta])* pub enum $name:ident as $noun:literal { $($body:tt)+ }) => {
    named_enum! { $(#[$meta])* pub enum $name { $($body)+ } }

    impl $name {
      /// Parses `s`, or a `RangeError` naming `field`.
      pub fn parse_field(s: &str, field: &str) -> $crate::error::Result<Self> {
        Self::parse(s).ok_or_else(|| {
          let names = Self::ALL.map(Self::as_str);
          let (last, rest) = names.split_last().expect("an enum has variants");
          let expected = format!("{} or {last}", rest.join(", "));
          let message = format!("unknown {} {s:?} (expected {expected})", $noun);
          $crate::error::QuotaError::range_error(field, message)
        })
      }
    }
  };
}
pub(crate) use named_enum;

named_enum! {
  /// What a dimension counts.
  pub enum QuotaUnit as "unit" {
    Percent = "percent",
    Requests = "requests",
    Tokens = "tokens",
    Usd = "usd",
  }
}

named_enum! {
  /// A rolling window length.
  pub enum QuotaWindow as "window" {
    FiveHours = "5h",
    Hourly = "hourly",
    Daily = "daily",
    Weekly = "weekly",
    Monthly = "monthly",
  }
}

impl QuotaWindow {
  /// `WINDOW_MS` of the contract; monthly is 30 days.
  pub fn ms(self) -> i64 {
    match self {
      QuotaWindow::Hourly => 3_600_000,
      QuotaWindow::FiveHours => 18_000_000,
      QuotaWindow::Daily => 86_400_000,
      QuotaWindow::Weekly => 604_800_000,
      QuotaWindow::Monthly => 2_592_000_000,
    }
  }
}

// The two-bucket sliding-window counter of docs/contract.md §2.

/// The bucket `now` falls in: `floor(now / window_ms)`.
pub fn bucket_index(now_ms: i64, window_ms: i64) -> i64 {
  now_ms.div_euclid(window_ms)
}

/// `prev × (1 − elapsed / window) + curr`, with `elapsed = now − curr_bucket × window`.
pub fn effective(prev: f64, curr: f64, now_ms: i64, window_ms: i64) -> f64 {
  // `now − bucket × window`, without the product (it overflows near `i64::MIN`).
  prev * prev_weight(elapsed_in_bucket(now_ms, window_ms), window_ms) + curr
}

/// The share of `prev` still inside the window, `1 − elapsed / window`.
pub fn prev_weight(elapsed_ms: i64, window_ms: i64) -> f64 {
  1.0 - elapsed_ms as f64 / window_ms as f64
}

/// Milliseconds since the current bucket began.
pub fn elapsed_in_bucket(now_ms: i64, window_ms: i64) -> i64 {
  now_ms.rem_euclid(window_ms)
}

named_enum! {
  /// How a key is held to its weighted share once the pool is saturated.
  pub enum Policy as "policy" {
    Hard = "hard",
    Soft = "soft",
    Burst = "burst",
  }
}

impl Policy {
  /// The decision's reading of a stored policy: anything unknown is `hard`
  /// (fail-safe, never a silent allow — docs/contract.md §3 rule 2).
  pub fn parse_lenient(s: &str) -> Self {
    Self::parse(s).unwrap_or(Policy::Hard)
  }
}

/// `{ unit, window, limit }`: `limit` is the pool-wide ceiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaDimension {
  pub unit: QuotaUnit,
  pub window: QuotaWindow,
  pub limit: f64,
}

/// `{ poolId, unit, window }`; its string form is `"<poolId>:<unit>:<window>"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DimensionKey {
  pub pool_id: String,
  pub unit: QuotaUnit,
  pub window: QuotaWindow,
}

impl DimensionKey {
  pub fn new(pool_id: impl Into<String>, unit: QuotaUnit, window: QuotaWindow) -> Self {
    DimensionKey {
      pool_id: pool_id.into(),
      unit,
      window,
    }
  }
}

/// A part of a cache key, appended to a reused buffer without the `fmt` machinery: the
/// hot path builds several keys per call, and `write!` cost more than the lookups.
pub trait PushKey {
  fn push_key(&self, out: &mut String);
}

impl PushKey for str {
  fn push_key(&self, out: &mut String) {
    out.push_str(self);
  }
}

impl PushKey for DimensionKey {
  /// The `Display` form, `poolId:unit:window`.
  fn push_key(&self, out: &mut String) {
    out.push_str(&self.pool_id);
    out.push(':');
    out.push_str(self.unit.as_str());
    out.push(':');
    out.push_str(self.window.as_str());
  }
}

impl PushKey for i64 {
  fn push_key(&self, out: &mut String) {
    out.push_str(itoa::Buffer::new().format(*self));
  }
}

impl fmt::Display for DimensionKey {
  fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "{}:{}:{}", self.pool_id, self.unit, self.window)
  }
}

/// One API key's share of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolAllocation {
  pub api_key_id: String,
  /// 0..=100.
  pub weight: f64,
  pub cap_value: Option<f64>,
  pub cap_unit: Option<QuotaUnit>,
  pub policy: Policy,
}

/// A pool of API keys sharing the quota of one or more upstream connections.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaPool {
  pub id: String,
  /// The primary connection.
  pub connection_id: String,
  /// Every member connection, primary first.
  pub connection_ids: Vec<String>,
  pub name: String,
  pub group_id: String,
  /// ISO-8601.
  pub created_at: String,
  pub allocations: Vec<PoolAllocation>,
}

named_enum! {
  /// Where a plan came from.
  pub enum PlanSource {
    Auto = "auto",
    Manual = "manual",
  }
}

/// The quota dimensions of an upstream account.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderPlan {
  pub connection_id: Option<String>,
  pub provider: String,
  pub dimensions: Vec<QuotaDimension>,
  pub source: PlanSource,
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn a_pushed_key_is_its_display_form() {
    let key = DimensionKey::new("p:1", QuotaUnit::Tokens, QuotaWindow::Hourly);
    let mut out = String::from("k\0");
    key.push_key(&mut out);
    (-42i64).push_key(&mut out);
    assert_eq!(out, format!("k\0{key}-42"));
  }

  #[test]
  fn names_round_trip() {
    for u in QuotaUnit::ALL {
      assert_eq!(QuotaUnit::parse(u.as_str()), Some(u));
    }
    for w in QuotaWindow::ALL {
      assert_eq!(QuotaWindow::parse(w.as_str()), Some(w));
    }
    for p in Policy::ALL {
      assert_eq!(Policy::parse(p.as_str()), Some(p));
    }
    assert_eq!(QuotaUnit::parse("bytes"), None);
    assert_eq!(QuotaWindow::parse("yearly"), None);
  }

  #[test]
  fn unknown_policy_reads_as_hard() {
    assert_eq!(Policy::parse_lenient("lenient"), Policy::Hard);
    assert_eq!(Policy::parse_lenient(""), Policy::Hard);
    assert_eq!(Policy::parse_lenient("soft"), Policy::Soft);
  }

  #[test]
  fn parse_errors_name_the_field() {
    let err = QuotaUnit::parse_field("bytes", "key.unit").unwrap_err();
    assert_eq!(
      err.to_string(),
      "key.unit: unknown unit \"bytes\" (expected percent, requests, tokens or usd)"
    );
    assert_eq!(err.code(), "ERR_QUOTA_INVALID_ARG");
    let err = QuotaWindow::parse_field("yearly", "w").unwrap_err();
    let expected = "w: unknown window \"yearly\" (expected 5h, hourly, daily, weekly or monthly)";
    assert_eq!(err.to_string(), expected);
    let err = Policy::parse_field("lenient", "p").unwrap_err();
    let expected = "p: unknown policy \"lenient\" (expected hard, soft or burst)";
    assert_eq!(err.to_string(), expected);
  }

  const H: i64 = 3_600_000;

  #[test]
  fn previous_bucket_decays_linearly() {
    // At the start of a bucket all of prev counts, halfway half of it, at the end none.
    assert_eq!(effective(100.0, 10.0, 7 * H, H), 110.0);
    assert_eq!(effective(100.0, 10.0, 7 * H + H / 2, H), 60.0);
    assert!((effective(100.0, 0.0, 8 * H - 1, H) - 100.0 / H as f64).abs() < 1e-9);
  }
}
