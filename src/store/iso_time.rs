//! ISO-8601 timestamps without a date-time crate: what `new Date(ms).toISOString()` gives.

/// `YYYY-MM-DDTHH:MM:SS.sssZ` for epoch milliseconds (proleptic Gregorian, UTC).
pub fn iso_from_ms(ms: i64) -> String {
  let days = ms.div_euclid(86_400_000);
  let in_day = ms.rem_euclid(86_400_000);
  let (year, month, day) = civil_from_days(days);
  let (h, m, s, milli) = (
    in_day / 3_600_000,
    in_day / 60_000 % 60,
    in_day / 1000 % 60,
    in_day % 1000,
  );
  if (0..=9999).contains(&year) {
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
  } else {
    // JavaScript's expanded years: a sign and six digits.
    let sign = if year < 0 { '-' } else { '+' };
    format!(
      "{sign}{:06}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z",
      year.abs()
    )
  }
}

/// Days since 1970-01-01 to (year, month, day) — Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
  let z = days + 719_468;
  let era = z.div_euclid(146_097);
  let doe = z.rem_euclid(146_097);
  let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
  let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  let mp = (5 * doy + 2) / 153;
  let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
  let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
  let year = yoe + era * 400 + i64::from(month <= 2);
  (year, month, day)
}

/// SQLite's `CURRENT_TIMESTAMP` form (`YYYY-MM-DD HH:MM:SS[.fff]`, UTC) as ISO-8601
/// (`YYYY-MM-DDTHH:MM:SS[.fff]Z`); any other text is returned unchanged.
pub fn normalize_sqlite_timestamp(text: &str) -> String {
  let b = text.as_bytes();
  let digits = |bytes: &[u8]| bytes.iter().all(u8::is_ascii_digit);
  let mut shape = b"0000-00-00 00:00:00".iter().zip(b);
  let looks_sqlite = b.len() >= 19
    && shape.all(|(p, c)| c == p || (*p == b'0' && c.is_ascii_digit()))
    && (b.len() == 19 || (b[19] == b'.' && b.len() > 20 && digits(&b[20..])));
  if looks_sqlite {
    format!("{}T{}Z", &text[..10], &text[11..])
  } else {
    text.to_string()
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn formats_like_to_iso_string() {
    assert_eq!(iso_from_ms(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(iso_from_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    assert_eq!(iso_from_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    assert_eq!(iso_from_ms(-1), "1969-12-31T23:59:59.999Z");
    assert_eq!(
      iso_from_ms(253_402_300_800_000),
      "+010000-01-01T00:00:00.000Z"
    );
  }

  #[test]
  fn normalizes_current_timestamp() {
    assert_eq!(
      normalize_sqlite_timestamp("2024-05-01 10:20:30"),
      "2024-05-01T10:20:30Z"
    );
    assert_eq!(
      normalize_sqlite_timestamp("2024-05-01 10:20:30.123"),
      "2024-05-01T10:20:30.123Z"
    );
    assert_eq!(
      normalize_sqlite_timestamp("2024-05-01T10:20:30.123Z"),
      "2024-05-01T10:20:30.123Z"
    );
    assert_eq!(normalize_sqlite_timestamp("yesterday"), "yesterday");
    assert_eq!(normalize_sqlite_timestamp(""), "");
  }
}
