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

/// What a saturation value is of: `(provider, connectionId, unit, window)`.
pub type Entry<'a> = (&'a str, &'a str, QuotaUnit, QuotaWindow);

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
  /// The entry's value and whether it is fresh (within its 30 s); an entry past that but
  /// at most [`SATURATION_STALE_MS`] past it is the value to serve while it is refreshed,
  /// an older one is none.
  pub fn get(&self, entry: Entry, now_ms: i64) -> Option<(f64, bool)> {
    let (value, expires_at) = self.stored(entry)?;
    (now_ms < expires_at.saturating_add(SATURATION_STALE_MS))
      .then_some((value, now_ms < expires_at))
  }

  /// The entry's `(value, expires_at)`, however old.
  fn stored(&self, (provider, connection_id, unit, window): Entry) -> Option<(f64, i64)> {
    let connection = self.entries.get(provider)?.get(connection_id)?;
    connection.get(&(unit, window)).copied()
  }

  pub fn put(&mut self, entry: Entry, value: f64, now_ms: i64) -> f64 {
    let (provider, connection_id, unit, window) = entry;
    let value = clamp_saturation(value);
    // At the bound, room is made for a new entry only: a refresh replaces its own.
    if self.len >= 10_000 && self.stored(entry).is_none() {
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

/// A rate-limit reading of one response: `remaining` of `limit` (> 0) left when it was
/// seen, and when the window resets (epoch ms; token readings only).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeaderReading {
  pub limit: f64,
  pub remaining: f64,
  pub reset_at_ms: Option<i64>,
  pub observed_at_ms: i64,
}

impl HeaderReading {
  /// `used / limit`, clamped; `None` once the reading is more than 5 min old.
  pub fn saturation(&self, now_ms: i64) -> Option<f64> {
    (now_ms - self.observed_at_ms <= HEADER_FRESHNESS_MS)
      .then(|| clamp_saturation((self.limit - self.remaining) / self.limit))
  }

  /// This token reading as `getTokenHeaderSaturation` answers it; `None` when stale.
  pub fn token_saturation(&self, now_ms: i64) -> Option<TokenHeaderSaturation> {
    Some(TokenHeaderSaturation {
      saturation: self.saturation(now_ms)?,
      reset_at_ms: self.reset_at_ms,
    })
  }
}

/// What one response's headers say, each reading `None` when it carries no usable one: a
/// connection keeps its earlier reading of that kind then.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HeaderReadings {
  pub requests: Option<HeaderReading>,
  pub tokens: Option<HeaderReading>,
}

/// A header number as JavaScript's `Number()` reads it, decimal only (blank is 0); `None`
/// unless finite.
fn parse_number(value: &str) -> Option<f64> {
  let text = value.trim();
  let n = if text.is_empty() {
    0.0
  } else {
    text.parse().ok()?
  };
  f64::is_finite(n).then_some(n)
}

/// The sum of the `<number><h|m|s|ms>` parts of a reset, wherever they stand (`6m0s`,
/// `1h30m`, `20ms`, `in 1.5s`); `None` when it has none.
pub fn parse_duration_ms(value: &str) -> Option<f64> {
  let bytes = value.as_bytes();
  let digits = |from: usize| {
    from
      + bytes[from..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count()
  };
  let (mut total, mut at, mut matched) = (0.0, 0, false);
  while at < bytes.len() {
    if !bytes[at].is_ascii_digit() {
      at += 1;
      continue;
    }
    let mut end = digits(at);
    if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_digit) {
      end = digits(end + 1);
    }
    let (scale, unit) = match &bytes[end..] {
      [b'm', b's', ..] => (1.0, 2),
      [b'h', ..] => (3_600_000.0, 1),
      [b'm', ..] => (60_000.0, 1),
      [b's', ..] => (1_000.0, 1),
      _ => {
        at = end;
        continue;
      }
    };
    let number: f64 = value[at..end]
      .parse()
      .ok()
      .filter(|n: &f64| n.is_finite())?;
    (total, at, matched) = (total + number * scale, end + unit, true);
  }
  matched.then_some(total)
}

/// The largest distance from the epoch a JavaScript `Date` can hold (±8.64 × 10¹⁵ ms).
pub const MAX_DATE_MS: i64 = 8_640_000_000_000_000;

/// A reset header as epoch ms: a date-time (it has `YYYY-MM-DD` and a `T` or `:`) when it
/// parses as one, else `now` plus its duration. A reset a JavaScript `Date` cannot hold
/// is unknown, as `Date.parse` has it: `None`, never an overflow.
pub fn parse_reset_ms(value: &str, now_ms: i64) -> Option<i64> {
  let text = value.trim();
  let date_shaped = text.as_bytes().windows(10).any(|w| {
    let digit = |range: std::ops::Range<usize>| w[range].iter().all(u8::is_ascii_digit);
    digit(0..4) && w[4] == b'-' && digit(5..7) && w[7] == b'-' && digit(8..10)
  }) && text.contains(['T', ':']);
  let at = match date_shaped.then(|| parse_iso8601_ms(text)).flatten() {
    Some(at) => at,
    None => {
      let ms = parse_duration_ms(text)?.round();
      if ms > MAX_DATE_MS as f64 {
        return None;
      }
      now_ms.checked_add(ms as i64)?
    }
  };
  (-MAX_DATE_MS..=MAX_DATE_MS).contains(&at).then_some(at)
}

/// Reads the rate-limit readings out of one response's `(name, value)` pairs (names in
/// any case; of a repeated name, the last).
pub fn parse_rate_limit_headers<'a>(
  headers: impl IntoIterator<Item = (&'a str, &'a str)>,
  now_ms: i64,
) -> HeaderReadings {
  let headers: Vec<(String, &str)> = (headers.into_iter())
    .map(|(name, value)| (name.to_ascii_lowercase(), value))
    .collect();
  let get = |name: &str| headers.iter().rev().find(|(n, _)| n == name).map(|h| h.1);
  let reading = |limit: &str, remaining: &str, reset: Option<&str>| {
    let (limit, remaining) = (parse_number(limit)?, parse_number(remaining)?);
    (limit > 0.0).then(|| HeaderReading {
      limit,
      remaining,
      reset_at_ms: reset.and_then(|reset| parse_reset_ms(reset, now_ms)),
      observed_at_ms: now_ms,
    })
  };
  // `(family, openai)`: `anthropic-ratelimit-<family>-<field>` or `x-ratelimit-<field><family>`.
  let header = |(family, openai): (&str, bool), field: &str| match openai {
    false => get(&format!("anthropic-ratelimit-{family}-{field}")),
    true => get(&format!("x-ratelimit-{field}{family}")),
  };
  // Requests: the first name present of each field, the unsuffixed openai one last; a
  // blank one is none (the host's module tests both for truth).
  let [limit, remaining] = ["limit", "remaining"].map(|field| {
    [("requests", false), ("-requests", true), ("", true)]
      .into_iter()
      .find_map(|family| header(family, field))
      .filter(|value| !value.is_empty())
  });
  let requests =
    (limit.zip(remaining)).and_then(|(limit, remaining)| reading(limit, remaining, None));
  // Tokens: the first group whose limit and remaining are usable, with its own reset.
  let tokens = [
    ("tokens", false),
    ("-tokens", true),
    ("input-tokens", false),
    ("output-tokens", false),
  ]
  .into_iter()
  .find_map(|g| {
    reading(
      header(g, "limit")?,
      header(g, "remaining")?,
      header(g, "reset"),
    )
  });
  HeaderReadings { requests, tokens }
}

/// `getTokenHeaderSaturation`'s value: how full the token budget is, and when it resets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenHeaderSaturation {
  pub saturation: f64,
  pub reset_at_ms: Option<i64>,
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
    let (q, new) = (("q", "c", u, w), ("p", "new", u, w));
    let fill = |cache: &mut SaturationCache| {
      for i in 0..10_000 {
        cache.put(("p", &format!("c{i}"), u, w), 0.5, 0);
      }
      assert_eq!(cache.len(), 10_000);
    };
    // Past the stale window: every entry goes.
    let mut cache = SaturationCache::default();
    fill(&mut cache);
    cache.put(q, 0.1, SATURATION_TTL_MS + SATURATION_STALE_MS);
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.get(("p", "c0", u, w), 0), None);
    // Expired but still servable stale: kept by the first pass, dropped by the second.
    let mut cache = SaturationCache::default();
    fill(&mut cache);
    cache.put(new, 0.2, SATURATION_TTL_MS);
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.get(new, SATURATION_TTL_MS), Some((0.2, true)));
    // Overwriting an entry does not count it twice.
    cache.put(new, 0.3, SATURATION_TTL_MS);
    assert_eq!(cache.len(), 1);
    cache.clear();
    assert!(cache.is_empty());
    // Every entry fresh: the cache starts over rather than passing over 10,000 entries
    // at every put from then on.
    fill(&mut cache);
    // A refresh of an entry it holds replaces that one only.
    cache.put(("p", "c0", u, w), 0.4, 0);
    assert_eq!(cache.get(("p", "c5", u, w), 0), Some((0.5, true)));
    cache.put(q, 0.1, 0);
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.get(q, 0), Some((0.1, true)));
  }

  #[test]
  fn cached_values_are_clamped_and_nan_is_zero() {
    let mut cache = SaturationCache::default();
    let key = ("p", "c", QuotaUnit::Tokens, QuotaWindow::Daily);
    assert_eq!(cache.put(key, 1.7, 0), 1.0);
    assert_eq!(cache.put(key, -0.2, 0), 0.0);
    assert_eq!(cache.put(key, f64::NAN, 0), 0.0);
  }

  #[test]
  fn durations_sum_their_unit_parts_wherever_they_stand() {
    let cases = [
      ("6m0s", Some(360_000.0)),
      ("1h30m15s", Some(5_415_000.0)),
      ("20ms", Some(20.0)),
      ("1.5s", Some(1_500.0)),
      ("in 6m0s", Some(360_000.0)),
      ("-5s", Some(5_000.0)),
      ("1m30", Some(60_000.0)),
      ("1.5.3s", Some(3_000.0)),
      ("30", None),
      ("500us", None),
      ("5.s", None),
      ("", None),
    ];
    for (input, expected) in cases {
      assert_eq!(parse_duration_ms(input), expected, "{input}");
    }
  }

  #[test]
  fn resets_are_date_times_or_durations_from_now() {
    let now = 1_000_000;
    for (text, expected) in [
      ("1970-01-01T00:20:00Z", Some(1_200_000)),
      ("2026-11-30T13:00:00+01:00", Some(1_796_040_000_000)),
      ("2026-11-30 12:00:00Z", Some(1_796_040_000_000)),
      // A date-time without a zone is read as UTC.
      ("2026-11-30T12:00:00", Some(1_796_040_000_000)),
      ("6m0s", Some(now + 360_000)),
      // Bare numbers are no reset; neither is a date-shaped text that is no date.
      ("30", None),
      ("1796040000", None),
      ("2026-13-30T12:00:00Z", None),
    ] {
      assert_eq!(parse_reset_ms(text, now), expected, "{text}");
    }
  }

  #[test]
  fn resets_a_date_cannot_hold_are_unknown_not_an_overflow() {
    // Found by tests/fuzz.rs: `now + duration` overflowed i64.
    assert_eq!(parse_reset_ms("2000h", i64::MAX - 1), None);
    assert_eq!(parse_reset_ms("99999999999999999999h", 0), None);
    assert_eq!(parse_reset_ms("1s", MAX_DATE_MS), None);
    assert_eq!(parse_reset_ms("1s", MAX_DATE_MS - 1000), Some(MAX_DATE_MS));
  }

  fn tokens(headers: &[(&str, &str)]) -> Option<(f64, Option<i64>)> {
    let reading = parse_rate_limit_headers(headers.iter().copied(), 0).tokens?;
    Some((reading.saturation(0)?, reading.reset_at_ms))
  }

  #[test]
  fn the_token_reading_is_the_first_usable_group_with_its_own_reset() {
    // Anthropic's own group first, in any case, is __test__/enforce.test.mjs's "keeps a
    // requests reading and a token reading apart". An unusable group gives way to the next.
    let openai = [
      ("anthropic-ratelimit-tokens-limit", "0"),
      ("Anthropic-RateLimit-Tokens-Remaining", "0"),
      ("x-ratelimit-limit-tokens", "1000"),
      ("x-ratelimit-remaining-tokens", "900"),
      ("x-ratelimit-reset-tokens", "6m0s"),
    ];
    assert_eq!(tokens(&openai), Some((0.1, Some(360_000))));
    let output = [
      ("anthropic-ratelimit-output-tokens-limit", "100"),
      ("anthropic-ratelimit-output-tokens-remaining", "25"),
    ];
    assert_eq!(tokens(&output), Some((0.75, None)));
    // openai's input/output token headers are none of the groups.
    let input = [
      ("x-ratelimit-limit-input-tokens", "100"),
      ("x-ratelimit-remaining-input-tokens", "25"),
    ];
    assert_eq!(tokens(&input), None);
    // Numbers as `Number()` reads them: blank is 0, so a blank remaining is all used.
    let blank = [
      ("x-ratelimit-limit-tokens", " 200 "),
      ("x-ratelimit-remaining-tokens", ""),
    ];
    assert_eq!(tokens(&blank), Some((1.0, None)));
    assert_eq!(tokens(&[("x-ratelimit-limit-tokens", "100")]), None);
  }

  #[test]
  fn the_requests_reading_takes_the_first_present_name_of_each_and_no_blank() {
    let requests = |headers: &[(&str, &str)]| {
      let reading = parse_rate_limit_headers(headers.iter().copied(), 0).requests?;
      reading.saturation(0)
    };
    let bare = [("x-ratelimit-limit", "50"), ("x-ratelimit-remaining", "10")];
    assert_eq!(requests(&bare), Some(0.8));
    let mixed = [
      ("x-ratelimit-remaining-requests", "40"),
      ("x-ratelimit-limit", "50"),
      ("x-ratelimit-remaining", "0"),
    ];
    assert_eq!(requests(&mixed), Some(0.2));
    let blank = [("x-ratelimit-limit", "50"), ("x-ratelimit-remaining", "")];
    assert_eq!(requests(&blank), None);
    let readings = parse_rate_limit_headers([("content-type", "text/plain")], 0);
    assert_eq!(readings, HeaderReadings::default());
  }

  #[test]
  fn readings_go_stale_after_five_minutes() {
    let headers = [
      ("x-ratelimit-limit-tokens", "100"),
      ("x-ratelimit-remaining-tokens", "0"),
    ];
    let reading = parse_rate_limit_headers(headers, 0).tokens.unwrap();
    assert_eq!(reading.saturation(HEADER_FRESHNESS_MS), Some(1.0));
    assert_eq!(reading.saturation(HEADER_FRESHNESS_MS + 1), None);
  }
}
