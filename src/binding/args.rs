//! Reading JavaScript arguments with the path of every value, so bad input is rejected
//! with an error naming the field (`dimensions[0].limit: expected a number, got string`).

use crate::error::QuotaError;
use napi::bindgen_prelude::{
  Array, JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Object, Unknown,
};
use napi::{JsValue, ValueType};

type ArgResult<T> = std::result::Result<T, QuotaError>;

/// `Number.MAX_SAFE_INTEGER`.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A JavaScript value and where it came from.
pub(crate) struct Arg<'env> {
  /// `None` for `undefined` (an absent property).
  value: Option<Unknown<'env>>,
  kind: ValueType,
  pub path: String,
}

fn type_name(kind: ValueType) -> &'static str {
  match kind {
    ValueType::Undefined => "undefined",
    ValueType::Null => "null",
    ValueType::Boolean => "boolean",
    ValueType::Number => "number",
    ValueType::String => "string",
    ValueType::Symbol => "symbol",
    ValueType::Object => "object",
    ValueType::Function => "function",
    ValueType::External => "external",
    ValueType::BigInt => "bigint",
    _ => "unknown",
  }
}

fn napi_fault(path: &str, err: napi::Error) -> QuotaError {
  QuotaError::type_error(path, format!("could not be read ({})", err.reason))
}

impl<'env> Arg<'env> {
  pub fn new(value: Unknown<'env>, path: impl Into<String>) -> ArgResult<Self> {
    Self::maybe(Some(value), path)
  }

  fn maybe(value: Option<Unknown<'env>>, path: impl Into<String>) -> ArgResult<Self> {
    let path = path.into();
    let kind = match &value {
      Some(value) => value.get_type().map_err(|e| napi_fault(&path, e))?,
      None => ValueType::Undefined,
    };
    Ok(Arg { value, kind, path })
  }

  fn present(&self) -> ArgResult<&Unknown<'env>> {
    self
      .value
      .as_ref()
      .ok_or_else(|| QuotaError::type_error(&self.path, "is missing"))
  }

  /// `undefined` or `null`.
  pub fn is_nullish(&self) -> bool {
    matches!(self.kind, ValueType::Undefined | ValueType::Null)
  }

  fn expected(&self, what: &str) -> QuotaError {
    QuotaError::type_error(
      &self.path,
      format!("expected {what}, got {}", type_name(self.kind)),
    )
  }

  fn object(&self) -> ArgResult<Object<'env>> {
    if self.kind != ValueType::Object {
      return Err(self.expected("an object"));
    }
    // SAFETY: the value was checked to be an object.
    unsafe { self.present()?.cast::<Object>() }.map_err(|e| napi_fault(&self.path, e))
  }

  /// The property `name` of this object (a `TypeError` when this is not an object).
  pub fn field(&self, name: &str) -> ArgResult<Arg<'env>> {
    let object = self.object()?;
    let path = if self.path.is_empty() {
      name.to_string()
    } else {
      format!("{}.{name}", self.path)
    };
    let value: Option<Unknown> = object.get(name).map_err(|e| napi_fault(&path, e))?;
    Arg::maybe(value, path)
  }

  pub fn number(&self) -> ArgResult<f64> {
    if self.kind != ValueType::Number {
      return Err(self.expected("a number"));
    }
    // SAFETY: the value was checked to be a number.
    unsafe { self.present()?.cast::<f64>() }.map_err(|e| napi_fault(&self.path, e))
  }

  /// A whole number JavaScript holds exactly (|n| <= 2^53 − 1): a bucket index. NaN,
  /// ±Infinity and fractions are `RangeError`s naming the field (`as i64` would make NaN
  /// 0 and Infinity `i64::MAX`).
  pub fn integer(&self) -> ArgResult<i64> {
    let n = self.number()?;
    if n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER {
      Ok(n as i64)
    } else {
      Err(QuotaError::range_error(
        &self.path,
        format!("must be an integer from -(2^53 - 1) to 2^53 - 1, got {n}"),
      ))
    }
  }

  /// A finite number (a time in ms; a fraction is truncated): NaN and ±Infinity are
  /// `RangeError`s naming the field.
  pub fn finite_ms(&self) -> ArgResult<i64> {
    let n = self.number()?;
    if n.is_finite() && n.abs() <= MAX_SAFE_INTEGER {
      Ok(n.trunc() as i64)
    } else {
      Err(QuotaError::range_error(
        &self.path,
        format!("must be a finite time in ms (|t| <= 2^53 - 1), got {n}"),
      ))
    }
  }

  /// A number, or `None` for `undefined`/`null`.
  pub fn opt_number(&self) -> ArgResult<Option<f64>> {
    if self.is_nullish() {
      Ok(None)
    } else {
      self.number().map(Some)
    }
  }

  pub fn string(&self) -> ArgResult<String> {
    if self.kind != ValueType::String {
      return Err(self.expected("a string"));
    }
    // SAFETY: the value was checked to be a string.
    unsafe { self.present()?.cast::<String>() }.map_err(|e| napi_fault(&self.path, e))
  }

  /// A string, or `None` for `undefined`/`null`.
  pub fn opt_string(&self) -> ArgResult<Option<String>> {
    if self.is_nullish() {
      Ok(None)
    } else {
      self.string().map(Some)
    }
  }

  /// Whether this is an object (arrays included; `null` is not).
  pub fn is_object(&self) -> bool {
    self.kind == ValueType::Object
  }

  pub fn boolean(&self) -> ArgResult<bool> {
    if self.kind != ValueType::Boolean {
      return Err(self.expected("a boolean"));
    }
    // SAFETY: the value was checked to be a boolean.
    unsafe { self.present()?.cast::<bool>() }.map_err(|e| napi_fault(&self.path, e))
  }

  /// The own enumerable string keys of an object, in property order.
  pub fn keys(&self) -> ArgResult<Vec<String>> {
    let object = self.object()?;
    let fault = |e| napi_fault(&self.path, e);
    let names = object
      .get_all_property_names(
        KeyCollectionMode::OwnOnly,
        KeyFilter::Enumerable,
        KeyConversion::NumbersToStrings,
      )
      .map_err(fault)?;
    let mut keys = Vec::new();
    for i in 0..names.get_array_length().map_err(fault)? {
      let name: Unknown = names.get_element(i).map_err(fault)?;
      // Symbol keys are skipped.
      if name.get_type().map_err(fault)? == ValueType::String {
        // SAFETY: the value was checked to be a string.
        keys.push(unsafe { name.cast::<String>() }.map_err(fault)?);
      }
    }
    Ok(keys)
  }

  /// The elements of an array.
  pub fn elements(&self) -> ArgResult<Vec<Arg<'env>>> {
    let object = self.object()?;
    if !object.is_array().map_err(|e| napi_fault(&self.path, e))? {
      return Err(self.expected("an array"));
    }
    // SAFETY: the value was checked to be an array.
    let array =
      unsafe { self.present()?.cast::<Array>() }.map_err(|e| napi_fault(&self.path, e))?;
    (0..array.len())
      .map(|i| {
        let path = format!("{}[{i}]", self.path);
        let value: Option<Unknown> = array.get(i).map_err(|e| napi_fault(&path, e))?;
        Arg::maybe(value, path)
      })
      .collect()
  }
}
