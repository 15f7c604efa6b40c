//! The runtime half of `#[from_core]` (the `macros/` crate): a plain Rust value as a
//! field of a napi result struct holds it.

use crate::core::dimensions::{PlanSource, Policy, QuotaUnit, QuotaWindow};
use crate::core::fair_share::{DecisionKind, DecisionReason};
use napi::bindgen_prelude::{Either, Null};

/// A core value as a JavaScript result holds it.
pub trait ToJs<T> {
  fn to_js(&self) -> T;
}

/// `$from` as `$to`: `$convert` of `self`.
macro_rules! to_js {
  ($($from:ty => $to:ty: |$self:ident| $convert:expr;)*) => {$(
    impl ToJs<$to> for $from {
      fn to_js(&$self) -> $to {
        $convert
      }
    }
  )*};
}

to_js! {
  String => String: |self| self.clone();
  &'static str => String: |self| self.to_string();
  f64 => f64: |self| *self;
  u32 => u32: |self| *self;
  bool => bool: |self| *self;
  // A flag: `true`, or absent.
  bool => Option<bool>: |self| self.then_some(true);
  // Counts, sequence numbers, bucket indices and times (epoch ms): below 2^53.
  u64 => f64: |self| *self as f64;
  i64 => f64: |self| *self as f64;
  // The core's enums by name.
  QuotaUnit => String: |self| self.as_str().to_string();
  QuotaWindow => String: |self| self.as_str().to_string();
  Policy => String: |self| self.as_str().to_string();
  PlanSource => String: |self| self.as_str().to_string();
  DecisionKind => String: |self| self.as_str().to_string();
  DecisionReason => String: |self| self.as_str().to_string();
}

impl<A: ToJs<B>, B> ToJs<Option<B>> for Option<A> {
  fn to_js(&self) -> Option<B> {
    self.as_ref().map(ToJs::to_js)
  }
}

impl<A: ToJs<B>, B> ToJs<Vec<B>> for Vec<A> {
  fn to_js(&self) -> Vec<B> {
    self.iter().map(ToJs::to_js).collect()
  }
}

/// `null` rather than an absent field.
impl<A: ToJs<B>, B> ToJs<Either<B, Null>> for Option<A> {
  fn to_js(&self) -> Either<B, Null> {
    self
      .as_ref()
      .map_or(Either::B(Null), |v| Either::A(v.to_js()))
  }
}
