//! The runtime half of `#[derive(FromCore)]` (the `macros/` crate): a plain Rust value as a
//! field of a napi result struct holds it.

use napi::bindgen_prelude::{Either, Null};

/// A core value as a JavaScript result holds it.
pub trait ToJs<T> {
  fn to_js(&self) -> T;
}

impl ToJs<String> for String {
  fn to_js(&self) -> String {
    self.clone()
  }
}

impl ToJs<String> for &'static str {
  fn to_js(&self) -> String {
    self.to_string()
  }
}

impl ToJs<f64> for f64 {
  fn to_js(&self) -> f64 {
    *self
  }
}

impl ToJs<u32> for u32 {
  fn to_js(&self) -> u32 {
    *self
  }
}

impl ToJs<bool> for bool {
  fn to_js(&self) -> bool {
    *self
  }
}

/// Counts and sequence numbers, which stay below 2^53.
impl ToJs<f64> for u64 {
  fn to_js(&self) -> f64 {
    *self as f64
  }
}

/// Bucket indices and times (epoch ms): numbers JavaScript holds exactly.
impl ToJs<f64> for i64 {
  fn to_js(&self) -> f64 {
    *self as f64
  }
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
