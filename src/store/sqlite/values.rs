//! Lenient reading of column values: rows the host (or a shell) wrote may carry another
//! type than the column declares. Reading never fails on a value's type. Also the
//! cached-statement shapes every cold query of the driver takes.

use rusqlite::types::{FromSql, ValueRef};
use rusqlite::{Connection, OptionalExtension, Params, Row};

/// A number: integers and reals as they are, numeric text parsed, anything else `None`.
pub fn f64_of(value: ValueRef<'_>) -> Option<f64> {
  match value {
    ValueRef::Integer(i) => Some(i as f64),
    ValueRef::Real(r) => Some(r),
    ValueRef::Text(t) => std::str::from_utf8(t).ok()?.trim().parse().ok(),
    _ => None,
  }
}

/// An integer: reals truncated, numeric text parsed, anything else `None`.
pub fn i64_of(value: ValueRef<'_>) -> Option<i64> {
  match value {
    ValueRef::Integer(i) => Some(i),
    ValueRef::Real(r) if r.is_finite() => Some(r as i64),
    ValueRef::Text(t) => {
      let text = std::str::from_utf8(t).ok()?.trim();
      text.parse().ok().or_else(|| {
        text
          .parse::<f64>()
          .ok()
          .filter(|r| r.is_finite())
          .map(|r| r as i64)
      })
    }
    _ => None,
  }
}

/// Text: numbers formatted, blobs as UTF-8 (lossy), NULL `None`.
pub fn string_of(value: ValueRef<'_>) -> Option<String> {
  match value {
    ValueRef::Null => None,
    ValueRef::Integer(i) => Some(i.to_string()),
    ValueRef::Real(r) => Some(r.to_string()),
    ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
  }
}

/// Column `i` as text, `""` for NULL.
pub fn text(row: &Row<'_>, i: usize) -> rusqlite::Result<String> {
  Ok(string_of(row.get_ref(i)?).unwrap_or_default())
}

/// Column `i` as a number, 0 for NULL or non-numeric text.
pub fn number(row: &Row<'_>, i: usize) -> rusqlite::Result<f64> {
  Ok(f64_of(row.get_ref(i)?).unwrap_or(0.0))
}

/// How many rows the cached statement `sql` changed.
pub fn exec(conn: &Connection, sql: &str, params: impl Params) -> rusqlite::Result<usize> {
  conn.prepare_cached(sql)?.execute(params)
}

/// The first column of the one row of the cached statement `sql`.
pub fn one<T: FromSql>(conn: &Connection, sql: &str, params: impl Params) -> rusqlite::Result<T> {
  conn
    .prepare_cached(sql)?
    .query_row(params, |row| row.get(0))
}

/// Every row of the cached statement `sql`, each read by `read`.
pub fn rows<T>(
  conn: &Connection,
  sql: &str,
  params: impl Params,
  read: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
  conn.prepare_cached(sql)?.query_map(params, read)?.collect()
}

/// [`rows`] of a statement prepared for this call only (diagnostics, migrations: kept,
/// they would crowd the hot path's statements out of the cache).
pub fn rows_once<T>(
  conn: &Connection,
  sql: &str,
  params: impl Params,
  read: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
  conn.prepare(sql)?.query_map(params, read)?.collect()
}

/// The first row of the cached statement `sql` read by `read`, or `None`.
pub fn first<T>(
  conn: &Connection,
  sql: &str,
  params: impl Params,
  read: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Option<T>> {
  conn.prepare_cached(sql)?.query_row(params, read).optional()
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn lenient_conversions() {
    assert_eq!(f64_of(ValueRef::Integer(3)), Some(3.0));
    assert_eq!(f64_of(ValueRef::Text(b" 2.5 ")), Some(2.5));
    assert_eq!(f64_of(ValueRef::Text(b"abc")), None);
    assert_eq!(f64_of(ValueRef::Null), None);
    assert_eq!(i64_of(ValueRef::Real(7.9)), Some(7));
    assert_eq!(i64_of(ValueRef::Text(b"12")), Some(12));
    assert_eq!(string_of(ValueRef::Integer(5)).as_deref(), Some("5"));
    assert_eq!(string_of(ValueRef::Null), None);
  }
}
