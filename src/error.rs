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
    match n.abs() {
      abs if abs.is_infinite() => f.write_str(if n > 0.0 { "Infinity" } else { "-Infinity" }),
      abs if abs.is_nan() || abs == 0.0 || (1e-6..1e21).contains(&abs) => write!(f, "{n}"),
      // JavaScript writes the exponent's sign: 1e+21.
      _ => f.write_str(&format!("{n:e}").replace('e', "e+").replace("e+-", "e-")),
    }
  }
}
