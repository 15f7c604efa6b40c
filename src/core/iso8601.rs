//! Parsing ISO-8601 timestamps to epoch milliseconds, as JavaScript's `Date.parse` reads
//! the ECMAScript date-time string format — without a date-time crate.
//!
//! Accepted: `YYYY`, `YYYY-MM`, `YYYY-MM-DD` (or an expanded year `±YYYYYY`), optionally
//! followed by `T` (or a space) and `HH:mm`, `HH:mm:ss` or `HH:mm:ss.fff…` (any number of
//! fraction digits, truncated to milliseconds), optionally followed by `Z` or an offset
//! `±HH:mm`, `±HHmm` or `±HH`.
//!
//! One deliberate difference: `Date.parse` reads a date-time *without* an offset as local
//! time; this reads it as UTC, so the result never depends on the machine's time zone.
//! Upstream usage APIs send `Z` or an offset.

/// Epoch milliseconds of an ISO-8601 timestamp, or `None` when `text` is not one.
pub fn parse_iso8601_ms(text: &str) -> Option<i64> {
  let mut p = Parser {
    bytes: text.trim().as_bytes(),
    at: 0,
  };
  let year = p.year()?;
  let (mut month, mut day) = (1, 1);
  if p.eat(b'-') {
    month = p.digits(2)?;
    if p.eat(b'-') {
      day = p.digits(2)?;
    }
  }
  if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
    return None;
  }
  let (mut hour, mut minute, mut second, mut milli) = (0, 0, 0, 0);
  let mut offset_ms = 0;
  if p.eat(b'T') || p.eat(b't') || p.eat(b' ') {
    hour = p.digits(2)?;
    p.eat(b':').then_some(())?;
    minute = p.digits(2)?;
    if p.eat(b':') {
      second = p.digits(2)?;
      if p.eat(b'.') {
        milli = p.fraction_ms()?;
      }
    }
    let valid_time = (hour < 24 && minute < 60 && second < 60)
      || (hour == 24 && minute == 0 && second == 0 && milli == 0);
    if !valid_time {
      return None;
    }
    offset_ms = p.zone()?;
  }
  if p.at != p.bytes.len() {
    return None;
  }
  let days = days_from_civil(year, month, day);
  let ms = days * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1000 + milli;
  Some(ms - offset_ms)
}

struct Parser<'a> {
  bytes: &'a [u8],
  at: usize,
}

impl Parser<'_> {
  fn eat(&mut self, byte: u8) -> bool {
    let hit = self.bytes.get(self.at) == Some(&byte);
    self.at += usize::from(hit);
    hit
  }

  /// Exactly `count` ASCII digits.
  fn digits(&mut self, count: usize) -> Option<i64> {
    let end = self.at.checked_add(count)?;
    let slice = self.bytes.get(self.at..end)?;
    if !slice.iter().all(u8::is_ascii_digit) {
      return None;
    }
    self.at = end;
    Some(slice.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
  }

  /// `YYYY`, or `+YYYYYY` / `-YYYYYY` (minus zero is not a year).
  fn year(&mut self) -> Option<i64> {
    if self.eat(b'+') {
      self.digits(6)
    } else if self.eat(b'-') {
      let year = self.digits(6)?;
      (year != 0).then_some(-year)
    } else {
      self.digits(4)
    }
  }

  /// One or more fraction digits, as whole milliseconds (truncated).
  fn fraction_ms(&mut self) -> Option<i64> {
    let start = self.at;
    let mut milli = 0;
    while let Some(d) = self.bytes.get(self.at).filter(|b| b.is_ascii_digit()) {
      if self.at - start < 3 {
        milli = milli * 10 + i64::from(d - b'0');
      }
      self.at += 1;
    }
    let digits = self.at - start;
    (digits > 0).then(|| milli * 10_i64.pow(3 - digits.min(3) as u32))
  }

  /// `Z`, `±HH:mm`, `±HHmm`, `±HH`, or nothing (UTC): the offset in milliseconds.
  fn zone(&mut self) -> Option<i64> {
    if self.eat(b'Z') || self.eat(b'z') {
      return Some(0);
    }
    let sign = if self.eat(b'+') {
      1
    } else if self.eat(b'-') {
      -1
    } else {
      return Some(0);
    };
    let hours = self.digits(2)?;
    // `±HH:mm`, `±HHmm`, or `±HH` at the end.
    let has_minutes = self.eat(b':') || self.at < self.bytes.len();
    let minutes = if has_minutes { self.digits(2)? } else { 0 };
    if hours > 23 || minutes > 59 {
      return None;
    }
    Some(sign * (hours * 3_600_000 + minutes * 60_000))
  }
}

fn is_leap(year: i64) -> bool {
  (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
  match month {
    2 if is_leap(year) => 29,
    2 => 28,
    4 | 6 | 9 | 11 => 30,
    _ => 31,
  }
}

/// Days since 1970-01-01 of a proleptic Gregorian date — Howard Hinnant's
/// `days_from_civil`.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
  let y = if month <= 2 { year - 1 } else { year };
  let era = y.div_euclid(400);
  let yoe = y.rem_euclid(400);
  let mp = (month + 9) % 12;
  let doy = (153 * mp + 2) / 5 + day - 1;
  let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
  use super::parse_iso8601_ms as parse;

  #[test]
  fn reads_what_to_iso_string_writes_and_the_shorter_forms_and_offsets() {
    for (text, ms) in [
      ("1970-01-01T00:00:00.000Z", 0),
      ("2024-02-29T12:34:56.789Z", 1_709_210_096_789),
      ("1969-12-31T23:59:59.999Z", -1),
      ("2025-01-01T00:00:00.5Z", 1_735_689_600_500),
      ("2025-01-01T00:00:00.123456789Z", 1_735_689_600_123),
    ] {
      assert_eq!(parse(text), Some(ms), "{text}");
    }
    // Each of these is the first instant of 2025.
    for text in [
      "2025-01-01T00:00:00.000Z",
      "2025-01-01",
      "2025-01",
      "2025",
      "2025-01-01T00:00Z",
      "2025-01-01T00:00:00Z",
      "2025-01-01 00:00:00Z",
      "2025-01-01T00:00:00",
      "2025-01-01T02:00:00+02:00",
      "2025-01-01T02:00:00+0200",
      "2024-12-31T22:00:00-02",
      "2024-12-31T24:00:00Z",
      "+002025-01-01T00:00:00Z",
    ] {
      assert_eq!(parse(text), Some(1_735_689_600_000), "{text}");
    }
  }

  #[test]
  fn rejects_what_is_not_a_timestamp() {
    for text in [
      "",
      "soon",
      "2025-13-01",
      "2025-02-30",
      "2023-02-29",
      "2025-01-01T25:00:00Z",
      "2025-01-01T24:00:01Z",
      "2025-01-01T00:60Z",
      "2025-01-01T00:00:00.Z",
      "2025-01-01T00:00:00Zjunk",
      "2025-1-1",
      "-000000-01-01",
      "1735689600000",
    ] {
      assert_eq!(parse(text), None, "{text}");
    }
  }
}
