//! The crate's one error type. Decisions (allow/block) are values, never errors;
//! these are the failures: bad input at the boundary and storage faults.

/// Which JavaScript error class an invalid argument becomes at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgErrorKind {
  /// The value has the wrong type (`TypeError`).
  Type,
  /// The value has the right type but is out of range or not allowed (`RangeError`).
  Range,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuotaError {
  /// Bad input; `field` is the path of the offending value, e.g. `dimensions[0].limit`.
  #[error("{field}: {message}")]
  InvalidArg {
    kind: ArgErrorKind,
    field: String,
    message: String,
  },
  /// The storage backend failed (I/O, corruption, a constraint, a lock held too long).
  #[error("quota store error: {0}")]
  Store(String),
  /// The storage server cannot be reached: refused, dropped, or no answer within the
  /// timeout (Redis). Retrying later may succeed; the hot path fails open.
  #[error("quota store unavailable: {0}")]
  Unavailable(String),
}

impl QuotaError {
  /// A `TypeError`: `field` does not have the expected type.
  pub fn type_error(field: impl Into<String>, message: impl Into<String>) -> Self {
    QuotaError::InvalidArg {
      kind: ArgErrorKind::Type,
      field: field.into(),
      message: message.into(),
    }
  }

  /// A `RangeError`: `field` has the right type but a value that is not allowed.
  pub fn range_error(field: impl Into<String>, message: impl Into<String>) -> Self {
    QuotaError::InvalidArg {
      kind: ArgErrorKind::Range,
      field: field.into(),
      message: message.into(),
    }
  }

  /// The stable `err.code` JavaScript sees.
  pub fn code(&self) -> &'static str {
    match self {
      QuotaError::InvalidArg { .. } => "ERR_QUOTA_INVALID_ARG",
      QuotaError::Store(_) => "ERR_QUOTA_STORE",
      QuotaError::Unavailable(_) => "ERR_QUOTA_REDIS_UNAVAILABLE",
    }
  }
}

pub type Result<T> = std::result::Result<T, QuotaError>;

/// A number as JavaScript's `String(n)` writes it (`Infinity`, `1e+21`, `1e-7`, `0` for
/// -0), for messages about values that came from JavaScript.
pub struct JsNumber(pub f64);

impl std::fmt::Display for JsNumber {
  fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    let n = self.0 + 0.0; // -0 is written 0
    if n.is_infinite() {
      f.write_str(if n > 0.0 { "Infinity" } else { "-Infinity" })
    } else if n.is_nan() || n == 0.0 || (1e-6..1e21).contains(&n.abs()) {
      write!(f, "{n}")
    } else {
      // JavaScript writes the exponent's sign: 1e+21.
      let exp = format!("{n:e}");
      match exp.split_once('e') {
        Some((digits, power)) if !power.starts_with('-') => write!(f, "{digits}e+{power}"),
        _ => f.write_str(&exp),
      }
    }
  }
}

#[cfg(test)]
mod tests {
  use super::JsNumber;

  #[test]
  fn numbers_read_as_javascript_writes_them() {
    let cases = [
      (f64::INFINITY, "Infinity"),
      (f64::NEG_INFINITY, "-Infinity"),
      (f64::NAN, "NaN"),
      (-0.0, "0"),
      (1000.0, "1000"),
      (0.1 + 0.2, "0.30000000000000004"),
      (0.000001, "0.000001"),
      (1.5e-7, "1.5e-7"),
      (-1e21, "-1e+21"),
      (123456789012345680000.0, "123456789012345680000"),
    ];
    for (n, js) in cases {
      assert_eq!(JsNumber(n).to_string(), js);
    }
  }
}
