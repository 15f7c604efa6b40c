//! Saturation signals of docs/contract.md §8, as pure data: the 30 s cache, the upstream
//! rate-limit headers (anthropic and openai families) and the token-header fallback.
//! Fetching is the host's (its fetchers call provider APIs); time is a parameter.

use std::collections::HashMap;

use crate::core::dimensions::{QuotaUnit, QuotaWindow};
use crate::core::iso8601::parse_iso8601_ms;

/// How long a fetched saturation value is reused.
pub const SATURATION_TTL_MS: i64 = 30_000;
/// How long past its 30 s an entry may still be served while one refresh runs
/// (stale-while-revalidate); older, a request waits for the fetch again.
pub const SATURATION_STALE_MS: i64 = 5 * 60_000;
/// How long recorded rate-limit headers count as fresh.
pub const HEADER_FRESHNESS_MS: i64 = 5 * 60_000;

/// Clamps a saturation into 0..=1; anything not a number is 0 (fail open).
pub fn clamp_saturation(value: f64) -> f64 {
  if value.is_nan() {
    0.0
  } else {
    value.clamp(0.0, 1.0)
  }
}

/// One connection's entries: `(unit, window)` → `(value, expires_at)`.
type ConnectionEntries = HashMap<(QuotaUnit, QuotaWindow), (f64, i64)>;

/// `(provider, connectionId, unit, window)` → saturation, each entry valid for 30 s.
/// Nested by provider and connection so a decision looks its entries up by `&str`: no key
/// is allocated per dimension per call.
#[derive(Debug, Default)]
pub struct SaturationCache {
  entries: HashMap<String, HashMap<String, ConnectionEntries>>,
  len: usize,
}

impl SaturationCache {
  /// The entry's `(value, expires_at)`, fresh or not.
  fn entry(
    &self,
    provider: &str,
    connection_id: &str,
    unit: QuotaUnit,
    window: QuotaWindow,
  ) -> Option<(f64, i64)> {
    self
      .entries
      .get(provider)?
      .get(connection_id)?
      .get(&(unit, window))
      .copied()
  }

  pub fn get(
    &self,
    provider: &str,
    connection_id: &str,
    unit: QuotaUnit,
    window: QuotaWindow,
    now_ms: i64,
  ) -> Option<f64> {
    let (value, expires_at) = self.entry(provider, connection_id, unit, window)?;
    (now_ms < expires_at).then_some(value)
  }

  /// An entry past its 30 s but at most [`SATURATION_STALE_MS`] past it: the value to
  /// serve while it is refreshed.
  pub fn stale(
    &self,
    provider: &str,
    connection_id: &str,
    unit: QuotaUnit,
    window: QuotaWindow,
    now_ms: i64,
  ) -> Option<f64> {
    let (value, expires_at) = self.entry(provider, connection_id, unit, window)?;
    let servable = expires_at.saturating_add(SATURATION_STALE_MS);
    (now_ms >= expires_at && now_ms < servable).then_some(value)
  }

  pub fn put(
    &mut self,
    provider: &str,
    connection_id: &str,
    unit: QuotaUnit,
    window: QuotaWindow,
    value: f64,
    now_ms: i64,
  ) -> f64 {
    let value = clamp_saturation(value);
    if self.len >= 10_000 {
      self.retain(|expires_at| now_ms < expires_at.saturating_add(SATURATION_STALE_MS));
      if self.len >= 10_000 {
        self.retain(|expires_at| now_ms < expires_at);
      }
      if self.len >= 10_000 {
        // All fresh: start over, so the next 10,000 puts are not a full pass each (a
        // dropped entry costs one fetch).
        self.clear();
      }
    }
    let connection = match self.entries.get_mut(provider) {
      Some(connections) => connections,
      None => self.entries.entry(provider.to_string()).or_default(),
    };
    let entries = match connection.get_mut(connection_id) {
      Some(entries) => entries,
      None => connection.entry(connection_id.to_string()).or_default(),
    };
    if entries
      .insert((unit, window), (value, now_ms + SATURATION_TTL_MS))
      .is_none()
    {
      self.len += 1;
    }
    value
  }

  /// Keeps the entries whose `expires_at` passes `keep`.
  fn retain(&mut self, mut keep: impl FnMut(i64) -> bool) {
    let mut len = 0;
    self.entries.retain(|_, connections| {
      connections.retain(|_, entries| {
        entries.retain(|_, (_, expires_at)| keep(*expires_at));
        len += entries.len();
        !entries.is_empty()
      });
      !connections.is_empty()
    });
    self.len = len;
  }

  pub fn clear(&mut self) {
    self.entries.clear();
    self.len = 0;
  }

  pub fn len(&self) -> usize {
    self.len
  }

  pub fn is_empty(&self) -> bool {
    self.len == 0
  }
}

/// One family of rate-limit headers (`requests`, `tokens`, `input-tokens`, `output-tokens`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RateLimitFamily {
  pub limit: Option<f64>,
  pub remaining: Option<f64>,
  /// When the family's window resets (epoch ms).
  pub reset_at_ms: Option<i64>,
}

/// The rate-limit headers of one upstream response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateLimitSnapshot {
  pub observed_at_ms: i64,
  pub requests: RateLimitFamily,
  pub tokens: RateLimitFamily,
  pub input_tokens: RateLimitFamily,
  pub output_tokens: RateLimitFamily,
}

impl RateLimitSnapshot {
  fn family_mut(&mut self, name: &str) -> Option<&mut RateLimitFamily> {
    match name {
      "requests" => Some(&mut self.requests),
      "tokens" => Some(&mut self.tokens),
      "input-tokens" => Some(&mut self.input_tokens),
      "output-tokens" => Some(&mut self.output_tokens),
      _ => None,
    }
  }

  fn is_empty(&self) -> bool {
    [
      self.requests,
      self.tokens,
      self.input_tokens,
      self.output_tokens,
    ]
    .iter()
    .all(|f| *f == RateLimitFamily::default())
  }
}

/// `(family, field)` of a header name: anthropic
/// `anthropic-ratelimit-<family>-<field>`, openai `x-ratelimit-<field>-<family>`.
fn classify(name: &str) -> Option<(&str, &str)> {
  if let Some(rest) = name.strip_prefix("anthropic-ratelimit-") {
    return rest.rsplit_once('-');
  }
  let (field, family) = name.strip_prefix("x-ratelimit-")?.split_once('-')?;
  Some((family, field))
}

/// Parses a header number (`"1500"`, `" 12.5 "`); anything else is `None`.
fn parse_number(value: &str) -> Option<f64> {
  value.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

/// A Go-style duration as openai sends it: `6m0s`, `1s`, `20ms`, `1h2m3.5s`, `0.5s`.
pub fn parse_duration_ms(value: &str) -> Option<f64> {
  let is_number = |c: char| c.is_ascii_digit() || c == '.';
  let mut rest = value.trim();
  let mut total = None;
  while !rest.is_empty() {
    // A number (never empty: "" does not parse), then its unit up to the next number.
    let (number, tail) = rest.split_at(rest.find(|c| !is_number(c)).unwrap_or(rest.len()));
    let (unit, tail) = tail.split_at(tail.find(is_number).unwrap_or(tail.len()));
    let scale = match unit {
      "h" => 3_600_000.0,
      "m" => 60_000.0,
      "s" | "" => 1_000.0,
      "ms" => 1.0,
      "us" | "µs" => 0.001,
      "ns" => 0.000_001,
      _ => return None,
    };
    total = Some(total.unwrap_or(0.0) + number.parse::<f64>().ok()? * scale);
    rest = tail;
  }
  total
}

/// An RFC 3339 instant (`2026-11-30T12:00:00Z`, `…T12:00:00.250+01:00`) in epoch ms: a
/// full date and time with a zone. Bare numbers are not instants here (`3600` is seconds).
pub fn parse_rfc3339_ms(value: &str) -> Option<i64> {
  let bytes = value.trim().as_bytes();
  let has_time = bytes.len() >= 20 && matches!(bytes[10], b'T' | b't' | b' ');
  let has_zone = matches!(bytes.last(), Some(b'Z' | b'z'))
    || (bytes.len() >= 6 && matches!(bytes[bytes.len() - 6], b'+' | b'-'));
  (has_time && has_zone)
    .then_some(value)
    .and_then(parse_iso8601_ms)
}

/// The largest distance from the epoch a JavaScript `Date` can hold (±8.64 × 10¹⁵ ms).
pub const MAX_DATE_MS: i64 = 8_640_000_000_000_000;

/// A reset header: an RFC 3339 instant, a duration (`6m0s`), or plain seconds. A reset
/// that a JavaScript `Date` cannot hold (a duration of millions of years, a year past
/// 275 760) is unknown, as `Date.parse` has it: `None`, never an overflow.
pub fn parse_reset_ms(value: &str, now_ms: i64) -> Option<i64> {
  let at = match parse_rfc3339_ms(value) {
    Some(at) => at,
    None => {
      let ms = parse_duration_ms(value)?.round();
      // `ms` is ≥ 0; beyond the Date range (or not finite) it is unknown anyway.
      if ms.is_nan() || ms > MAX_DATE_MS as f64 {
        return None;
      }
      now_ms.checked_add(ms as i64)?
    }
  };
  (-MAX_DATE_MS..=MAX_DATE_MS).contains(&at).then_some(at)
}

/// Reads the rate-limit headers out of `(name, value)` pairs (names in any case); `None`
/// when there are none.
pub fn parse_rate_limit_headers<'a>(
  headers: impl IntoIterator<Item = (&'a str, &'a str)>,
  now_ms: i64,
) -> Option<RateLimitSnapshot> {
  let mut snapshot = RateLimitSnapshot {
    observed_at_ms: now_ms,
    ..RateLimitSnapshot::default()
  };
  for (name, value) in headers {
    let name = name.to_ascii_lowercase();
    let Some((family, field)) = classify(&name) else {
      continue;
    };
    let Some(family) = snapshot.family_mut(family) else {
      continue;
    };
    match field {
      "limit" => family.limit = parse_number(value),
      "remaining" => family.remaining = parse_number(value),
      "reset" => family.reset_at_ms = parse_reset_ms(value, now_ms),
      _ => {}
    }
  }
  (!snapshot.is_empty()).then_some(snapshot)
}

/// `getTokenHeaderSaturation`'s value: how full the token budget is, and when it resets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenHeaderSaturation {
  pub saturation: f64,
  pub reset_at_ms: Option<i64>,
}

/// The token family's `used / limit` (clamped), from headers at most 5 min old; `None`
/// when stale or incomplete. Prefers `tokens`, then `input-tokens`, then `output-tokens`.
pub fn token_header_saturation(
  snapshot: &RateLimitSnapshot,
  now_ms: i64,
) -> Option<TokenHeaderSaturation> {
  if now_ms - snapshot.observed_at_ms > HEADER_FRESHNESS_MS {
    return None;
  }
  [
    snapshot.tokens,
    snapshot.input_tokens,
    snapshot.output_tokens,
  ]
  .into_iter()
  .find_map(|family| {
    let (limit, remaining) = (family.limit?, family.remaining?);
    (limit > 0.0).then(|| TokenHeaderSaturation {
      saturation: clamp_saturation((limit - remaining) / limit),
      reset_at_ms: family.reset_at_ms,
    })
  })
}

/// Anthropic's weak last resort when its plan window is unknown: the requests family's
/// `used / limit` (clamped) from headers at most 5 min old; `None` when stale or incomplete.
pub fn request_header_saturation(snapshot: &RateLimitSnapshot, now_ms: i64) -> Option<f64> {
  if now_ms - snapshot.observed_at_ms > HEADER_FRESHNESS_MS {
    return None;
  }
  let (limit, remaining) = (snapshot.requests.limit?, snapshot.requests.remaining?);
  (limit > 0.0).then(|| clamp_saturation((limit - remaining) / limit))
}

#[cfg(test)]
mod tests {
  use super::*;

  /// That an entry hits for 30 s, then not, is `an_expired_entry_is_served_while_one_refresh_runs`
  /// of engine/saturation.rs; that it is kept per connection, its `a_lookup_is_a_hit_…`; per
  /// window, __test__/enforce.test.mjs's "saturation: cached for 30 s per (…)".
  #[test]
  fn a_full_cache_drops_stale_entries_first_then_expired_ones() {
    let (u, w) = (QuotaUnit::Tokens, QuotaWindow::Hourly);
    let fill = |cache: &mut SaturationCache| {
      for i in 0..10_000 {
        cache.put("p", &format!("c{i}"), u, w, 0.5, 0);
      }
      assert_eq!(cache.len(), 10_000);
    };
    // Past the stale window: every entry goes.
    let mut cache = SaturationCache::default();
    fill(&mut cache);
    cache.put("q", "c", u, w, 0.1, SATURATION_TTL_MS + SATURATION_STALE_MS);
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.get("p", "c0", u, w, 0), None);
    // Expired but still servable stale: kept by the first pass, dropped by the second.
    let mut cache = SaturationCache::default();
    fill(&mut cache);
    cache.put("p", "c0", u, w, 0.2, SATURATION_TTL_MS);
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.get("p", "c0", u, w, SATURATION_TTL_MS), Some(0.2));
    // Overwriting an entry does not count it twice.
    cache.put("p", "c0", u, w, 0.3, SATURATION_TTL_MS);
    assert_eq!(cache.len(), 1);
    cache.clear();
    assert!(cache.is_empty());
    // Every entry fresh: the cache starts over rather than passing over 10,000 entries
    // at every put from then on.
    fill(&mut cache);
    cache.put("q", "c", u, w, 0.1, 0);
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.get("q", "c", u, w, 0), Some(0.1));
  }

  #[test]
  fn cached_values_are_clamped_and_nan_is_zero() {
    let mut cache = SaturationCache::default();
    let (u, w) = (QuotaUnit::Tokens, QuotaWindow::Daily);
    assert_eq!(cache.put("p", "c", u, w, 1.7, 0), 1.0);
    assert_eq!(cache.put("p", "c", u, w, -0.2, 0), 0.0);
    assert_eq!(cache.put("p", "c", u, w, f64::NAN, 0), 0.0);
  }

  #[test]
  fn durations() {
    let cases = [
      ("6m0s", Some(360_000.0)),
      ("1s", Some(1_000.0)),
      ("20ms", Some(20.0)),
      ("1h2m3.5s", Some(3_723_500.0)),
      ("0.5s", Some(500.0)),
      ("30", Some(30_000.0)),
      ("", None),
      ("soon", None),
      ("5x", None),
    ];
    for (input, expected) in cases {
      assert_eq!(parse_duration_ms(input), expected, "{input}");
    }
  }

  #[test]
  fn rfc3339_instants() {
    for (text, expected) in [
      ("1970-01-01T00:00:00Z", Some(0)),
      ("2026-11-30T12:00:00Z", Some(1_796_040_000_000)),
      ("2026-11-30T12:00:00.250Z", Some(1_796_040_000_250)),
      ("2026-11-30T13:00:00+01:00", Some(1_796_040_000_000)),
      // Without a zone, not a date, or a bare number (seconds, not an instant).
      ("2026-11-30T12:00:00", None),
      ("yesterday", None),
      ("2026-13-30T12:00:00Z", None),
      ("3600", None),
      ("ééééééééééééééééééééé", None),
    ] {
      assert_eq!(parse_rfc3339_ms(text), expected, "{text}");
    }
  }

  /// The openai family (`x-ratelimit-<field>-tokens`, a `6m0s` reset) is __test__/
  /// enforce.test.mjs's "saturation: cached for 30 s …; header fallback".
  #[test]
  fn anthropic_headers_in_any_case() {
    let now = 1_000_000;
    let anthropic = parse_rate_limit_headers(
      [
        ("anthropic-ratelimit-tokens-limit", "1000"),
        ("anthropic-ratelimit-tokens-remaining", "250"),
        ("Anthropic-RateLimit-Tokens-Reset", "1970-01-01T00:20:00Z"),
        ("anthropic-ratelimit-requests-limit", "50"),
        ("content-type", "application/json"),
      ],
      now,
    )
    .unwrap();
    assert_eq!(anthropic.tokens.limit, Some(1000.0));
    assert_eq!(anthropic.tokens.reset_at_ms, Some(1_200_000));
    assert_eq!(anthropic.requests.limit, Some(50.0));
    let saturation = token_header_saturation(&anthropic, now).unwrap();
    assert_eq!(saturation.saturation, 0.75);
  }

  #[test]
  fn headers_go_stale_after_five_minutes_and_need_limit_and_remaining() {
    let snapshot = parse_rate_limit_headers(
      [
        ("x-ratelimit-limit-tokens", "100"),
        ("x-ratelimit-remaining-tokens", "0"),
      ],
      0,
    )
    .unwrap();
    assert!(token_header_saturation(&snapshot, HEADER_FRESHNESS_MS).is_some());
    assert!(token_header_saturation(&snapshot, HEADER_FRESHNESS_MS + 1).is_none());
    let partial = parse_rate_limit_headers([("x-ratelimit-limit-tokens", "100")], 0).unwrap();
    assert!(token_header_saturation(&partial, 0).is_none());
    assert!(parse_rate_limit_headers([("content-type", "text/plain")], 0).is_none());
  }

  #[test]
  fn resets_a_date_cannot_hold_are_unknown_not_an_overflow() {
    // Found by tests/fuzz.rs: `now + duration` overflowed i64 (a panic in debug builds, a
    // wrapped, negative reset in release ones).
    assert_eq!(parse_reset_ms("2000h", i64::MAX - 1), None);
    assert_eq!(parse_reset_ms("99999999999999999999h", 0), None);
    assert_eq!(parse_reset_ms("1s", MAX_DATE_MS), None);
    assert_eq!(parse_reset_ms("1s", MAX_DATE_MS - 1000), Some(MAX_DATE_MS));
    // Plain seconds past the Date range (10^21 s).
    assert_eq!(parse_reset_ms("999999999999999999999", 0), None);
    // RFC 3339 has four-digit years, so an instant is always within the Date range.
    assert_eq!(
      parse_reset_ms("9999-12-31T23:59:59Z", i64::MAX),
      Some(253_402_300_799_000)
    );
  }
}
