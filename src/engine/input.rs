//! Reading the host's arguments with the path of every value, so bad input is rejected
//! with an error naming the field (`dimensions[0].limit: expected a number, got string`)
//! before anything is written (docs/contract.md §0). The values themselves are behind
//! [`Source`], which the napi edge implements for JavaScript values: this module decides
//! what is accepted, the edge only reads.

pub use super::{clock, now_ms};
use crate::core::burn_rate::{
  compute_burn_rate, compute_burn_rate_from_window, window_length_ms, BurnRate,
};
use crate::core::dimensions::{
  named_enum, DimensionKey, PlanSource, Policy, PoolAllocation, ProviderPlan, QuotaDimension,
  QuotaUnit, QuotaWindow,
};
use crate::core::fair_share::{
  decide_fair_share, AllocationInput, DimensionInput, FairShareDecision, FairShareInput,
  WindowBreakdown,
};
use crate::core::iso8601::parse_iso8601_ms;
use crate::core::scheduler::account_buckets::QuotaReading;
use crate::error::{JsNumber, QuotaError, Result};
use crate::store::{LegacyPool, ModelCap, NewPool, PlanDimension, PoolUpdate};

/// The most elements an array argument may have: far above any real pool, plan, history
/// or command, and few enough that reading them all is bounded work.
pub const MAX_ELEMENTS: u32 = 65_536;

/// `Number.MAX_SAFE_INTEGER`.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

named_enum! {
  /// The type of a value, as `typeof` names it (`null` apart).
  pub enum Kind {
    Undefined = "undefined",
    Null = "null",
    Boolean = "boolean",
    Number = "number",
    String = "string",
    Symbol = "symbol",
    Object = "object",
    Function = "function",
    External = "external",
    BigInt = "bigint",
    Unknown = "unknown",
  }
}

/// What the runtime could not do, in its own words.
pub type Fault = String;

/// A value of the host's runtime. Each read is asked only of a value of the right
/// [`Kind`]; `Err` is the runtime's own failure, reported as the field that "could not be
/// read".
pub trait Source: Sized {
  fn kind(&self) -> std::result::Result<Kind, Fault>;
  fn number(&self) -> std::result::Result<f64, Fault>;
  fn string(&self) -> std::result::Result<String, Fault>;
  fn boolean(&self) -> std::result::Result<bool, Fault>;
  /// The property `name` of an object, with its kind; `None` for `undefined`.
  fn property(&self, name: &str) -> std::result::Result<Option<(Self, Kind)>, Fault>;
  fn is_array(&self) -> std::result::Result<bool, Fault>;
  /// The length of an array.
  fn length(&self) -> std::result::Result<u32, Fault>;
  /// Element `index` of an array, with its kind; `None` for `undefined`.
  fn element(&self, index: u32) -> std::result::Result<Option<(Self, Kind)>, Fault>;
  /// The own enumerable string keys of an object, in property order (symbols skipped).
  fn keys(&self) -> std::result::Result<Vec<String>, Fault>;
}

fn fault(path: &Path, reason: Fault) -> QuotaError {
  QuotaError::type_error(path.to_string(), format!("could not be read ({reason})"))
}

/// Where a value came from: an argument, or a field or an element of another value.
/// Written out (`input.dimensions[0].limit`) only for an error, so reading a field makes
/// no string.
#[derive(Debug, Clone, Copy)]
pub enum Path<'p> {
  Arg(&'static str),
  Field(&'p Path<'p>, &'p str),
  Element(&'p Path<'p>, u32),
}

impl Path<'_> {
  fn write(&self, out: &mut String) {
    match *self {
      Path::Arg(name) => out.push_str(name),
      Path::Field(parent, name) => {
        parent.write(out);
        if !out.is_empty() {
          out.push('.');
        }
        out.push_str(name);
      }
      Path::Element(parent, index) => {
        parent.write(out);
        out.push('[');
        out.push_str(itoa::Buffer::new().format(index));
        out.push(']');
      }
    }
  }
}

impl std::fmt::Display for Path<'_> {
  fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    let mut path = String::new();
    self.write(&mut path);
    f.write_str(&path)
  }
}

/// A value and where it came from.
pub struct Arg<'p, V> {
  /// `None` for `undefined` (an absent property).
  value: Option<V>,
  kind: Kind,
  pub path: Path<'p>,
}

impl<'p, V: Source> Arg<'p, V> {
  /// The argument `name`.
  pub fn new(value: V, name: &'static str) -> Result<Self> {
    Self::maybe(Some(value), name)
  }

  /// The argument `name`, or `undefined`.
  pub fn maybe(value: Option<V>, name: &'static str) -> Result<Self> {
    let path = Path::Arg(name);
    let kind = match &value {
      Some(value) => value.kind().map_err(|e| fault(&path, e))?,
      None => Kind::Undefined,
    };
    Ok(Arg { value, kind, path })
  }

  /// A value read at `path`, with its kind.
  fn read_at(value: Option<(V, Kind)>, path: Path<'p>) -> Self {
    let (value, kind) = value.map_or((None, Kind::Undefined), |(v, kind)| (Some(v), kind));
    Arg { value, kind, path }
  }

  fn present(&self) -> Result<&V> {
    self
      .value
      .as_ref()
      .ok_or_else(|| QuotaError::type_error(self.path.to_string(), "is missing"))
  }

  /// `undefined` or `null`.
  pub fn is_nullish(&self) -> bool {
    matches!(self.kind, Kind::Undefined | Kind::Null)
  }

  /// Whether this is an object (arrays included; `null` is not).
  pub fn is_object(&self) -> bool {
    self.kind == Kind::Object
  }

  fn expected(&self, what: &str) -> QuotaError {
    QuotaError::type_error(
      self.path.to_string(),
      format!("expected {what}, got {}", self.kind),
    )
  }

  fn read<T>(
    &self,
    kind: Kind,
    what: &str,
    read: impl FnOnce(&V) -> std::result::Result<T, Fault>,
  ) -> Result<T> {
    if self.kind != kind {
      return Err(self.expected(what));
    }
    read(self.present()?).map_err(|e| fault(&self.path, e))
  }

  /// A `TypeError` unless this is an object (arrays included).
  pub fn object(&self) -> Result<()> {
    self.read(Kind::Object, "an object", |_| Ok(()))
  }

  /// The property `name` of this object (a `TypeError` when this is not an object).
  pub fn field<'a>(&'a self, name: &'a str) -> Result<Arg<'a, V>> {
    self.object()?;
    let path = Path::Field(&self.path, name);
    let value = self
      .present()?
      .property(name)
      .map_err(|e| fault(&path, e))?;
    Ok(Arg::read_at(value, path))
  }

  pub fn number(&self) -> Result<f64> {
    self.read(Kind::Number, "a number", V::number)
  }

  /// A whole number JavaScript holds exactly (|n| <= 2^53 − 1): a bucket index. NaN,
  /// ±Infinity and fractions are `RangeError`s naming the field (`as i64` would make NaN
  /// 0 and Infinity `i64::MAX`).
  pub fn integer(&self) -> Result<i64> {
    let n = self.number()?;
    let ok = n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER;
    self.must_be(ok, n, "an integer from -(2^53 - 1) to 2^53 - 1")?;
    Ok(n as i64)
  }

  /// A finite number (a time in ms; a fraction is truncated): NaN and ±Infinity are
  /// `RangeError`s naming the field.
  pub fn finite_ms(&self) -> Result<i64> {
    let n = self.number()?;
    let ok = n.is_finite() && n.abs() <= MAX_SAFE_INTEGER;
    self.must_be(ok, n, "a finite time in ms (|t| <= 2^53 - 1)")?;
    Ok(n.trunc() as i64)
  }

  /// `Ok` when `ok`, else a `RangeError` naming this value: `must be {must}, got {n}`.
  fn must_be(&self, ok: bool, n: f64, must: &str) -> Result<()> {
    if ok {
      return Ok(());
    }
    let message = format!("must be {must}, got {}", JsNumber(n));
    Err(QuotaError::range_error(self.path.to_string(), message))
  }

  /// `read` of this value, or `None` for `undefined`/`null`.
  pub fn unless_nullish<T>(&self, read: impl FnOnce(&Self) -> Result<T>) -> Result<Option<T>> {
    if self.is_nullish() {
      Ok(None)
    } else {
      read(self).map(Some)
    }
  }

  /// A number, or `None` for `undefined`/`null`.
  pub fn opt_number(&self) -> Result<Option<f64>> {
    self.unless_nullish(Self::number)
  }

  pub fn string(&self) -> Result<String> {
    self.read(Kind::String, "a string", V::string)
  }

  /// A string, or `None` for `undefined`/`null`.
  pub fn opt_string(&self) -> Result<Option<String>> {
    self.unless_nullish(Self::string)
  }

  /// A string parsed by `parse_field` (`QuotaUnit::parse_field`, …), whose error names
  /// this value's path: written out only then.
  pub fn parsed<T>(&self, parse_field: impl Fn(&str, &str) -> Result<T>) -> Result<T> {
    let text = self.string()?;
    parse_field(&text, "").or_else(|_| parse_field(&text, &self.path.to_string()))
  }

  /// [`Arg::parsed`], or `None` for `undefined`/`null`.
  pub fn opt_parsed<T>(&self, parse_field: impl Fn(&str, &str) -> Result<T>) -> Result<Option<T>> {
    self.unless_nullish(|arg| arg.parsed(parse_field))
  }

  pub fn boolean(&self) -> Result<bool> {
    self.read(Kind::Boolean, "a boolean", V::boolean)
  }

  /// The own enumerable string keys of an object, in property order.
  pub fn keys(&self) -> Result<Vec<String>> {
    self.read(Kind::Object, "an object", V::keys)
  }

  /// Each element of an array, read with `read` in order. An array's length costs its
  /// caller nothing (`new Array(2 ** 32 - 1)`, or a Proxy's `length` trap), so it is
  /// bounded ([`MAX_ELEMENTS`]) and sizes nothing, and the first bad element ends the read.
  pub fn list<T>(&self, read: impl Fn(&Arg<'_, V>) -> Result<T>) -> Result<Vec<T>> {
    if !self.read(Kind::Object, "an object", V::is_array)? {
      return Err(self.expected("an array"));
    }
    let array = self.present()?;
    let length = array.length().map_err(|e| fault(&self.path, e))?;
    if length > MAX_ELEMENTS {
      let message = format!("must have at most {MAX_ELEMENTS} elements, got {length}");
      return Err(QuotaError::range_error(self.path.to_string(), message));
    }
    let mut values = Vec::new();
    for i in 0..length {
      let path = Path::Element(&self.path, i);
      let value = array.element(i).map_err(|e| fault(&path, e))?;
      values.push(read(&Arg::read_at(value, path))?);
    }
    Ok(values)
  }
}

/// What a `dbPath` resolver returned (docs/contract.md §0): its string, or what is wrong
/// with it, as the warning says it.
pub fn resolved_path<V: Source>(value: &V) -> std::result::Result<String, String> {
  let what = match value.kind()? {
    Kind::String => {
      let path = value.string()?;
      if path.contains('\0') {
        return Err("returned a path with a NUL character".into());
      }
      return Ok(path);
    }
    Kind::Undefined => "undefined",
    Kind::Null => "null",
    Kind::Number => "a number",
    Kind::Boolean => "a boolean",
    Kind::Object => "an object",
    Kind::Function => "a function",
    _ => "a non-string",
  };
  Err(format!("returned {what} instead of a string"))
}

/// `installHost`'s `dbPath`: absent (the default path), a path, or `None` for a function
/// returning one (which the edge keeps, to call on the JS thread).
pub fn db_path<V: Source>(arg: &Arg<V>) -> Result<Option<crate::engine::database::PathSource>> {
  use crate::engine::database::PathSource;
  match arg.kind {
    Kind::Undefined | Kind::Null => Ok(Some(PathSource::Default)),
    Kind::String => {
      let path = arg.string()?;
      let problem = if path.is_empty() {
        "must be a file's path, got an empty string"
      } else if path.contains('\0') {
        "must be a file's path, got a string with a NUL character"
      } else {
        return Ok(Some(PathSource::Fixed(path.into())));
      };
      Err(QuotaError::range_error(arg.path.to_string(), problem))
    }
    Kind::Function => Ok(None),
    _ => Err(arg.expected("a string or a function returning one")),
  }
}

// ---- the counter and metadata tables (docs/contract.md §5) ------------------------------

/// `nowMs` of `incrementBucket`: the clock when absent, else a finite time.
pub fn bucket_time<V: Source>(arg: &Arg<V>) -> Result<i64> {
  Ok(arg.unless_nullish(Arg::finite_ms)?.unwrap_or_else(now_ms))
}

/// `limit` of `listConsumptionForPool`: 100 when absent, 500 when not finite.
pub fn row_limit<V: Source>(arg: &Arg<V>) -> Result<i64> {
  let limit = arg.opt_number()?.unwrap_or(100.0);
  // ±Infinity saturate (to the clamp's 1 and 500, as the host's Math.max/min do).
  Ok(if limit.is_nan() { 500 } else { limit as i64 })
}

/// `gcOlderThan`'s cutoff: a finite time in ms, rounded up, so that "`updated_at` strictly
/// older" holds for a fraction too (a row at 1000 is older than 1000.5).
pub fn cutoff_ms<V: Source>(arg: &Arg<V>) -> Result<i64> {
  let whole = arg.finite_ms()?;
  Ok(whole + i64::from(arg.number()? > whole as f64))
}

/// `{ limit?, offset? }` of `listPools`, as the host reads them: a limit not > 0 lists every
/// pool (the offset then ignored); each number clamped to `0..=u32::MAX`.
pub fn page<V: Source>(options: &Arg<V>) -> Result<(Option<u32>, Option<u32>)> {
  let clamp = |n: f64| n.clamp(0.0, u32::MAX as f64) as u32;
  if options.is_nullish() {
    return Ok((None, None));
  }
  let limit = options.field("limit")?.opt_number()?.filter(|n| *n > 0.0);
  let offset = options.field("offset")?.opt_number()?;
  Ok((limit.map(clamp), limit.and(offset).map(clamp)))
}

/// An allocation as written: unknown policy/unit and bad numbers are rejected here or by
/// the store's validation, with the field named.
pub fn allocation<V: Source>(arg: &Arg<V>) -> Result<PoolAllocation> {
  let cap_unit = arg.field("capUnit")?;
  let policy = arg.field("policy")?;
  Ok(PoolAllocation {
    api_key_id: arg.field("apiKeyId")?.string()?,
    weight: arg.field("weight")?.number()?,
    cap_value: arg.field("capValue")?.opt_number()?,
    cap_unit: cap_unit.opt_parsed(QuotaUnit::parse_field)?,
    policy: policy
      .opt_parsed(Policy::parse_field)?
      .unwrap_or(Policy::Hard),
  })
}

pub fn allocations<V: Source>(arg: &Arg<V>) -> Result<Vec<PoolAllocation>> {
  arg.list(allocation)
}

pub fn strings<V: Source>(arg: &Arg<V>) -> Result<Vec<String>> {
  arg.list(|a| a.string())
}

/// `createPool`'s input.
pub fn new_pool<V: Source>(input: &Arg<V>) -> Result<NewPool> {
  let allocations = input.field("allocations")?;
  let connection_ids = input.field("connectionIds")?;
  Ok(NewPool {
    connection_id: input.field("connectionId")?.string()?,
    name: input.field("name")?.string()?,
    group_id: input.field("groupId")?.opt_string()?,
    allocations: allocations
      .unless_nullish(self::allocations)?
      .unwrap_or_default(),
    connection_ids: connection_ids.unless_nullish(strings)?.unwrap_or_default(),
  })
}

/// `updatePool`'s patch.
pub fn pool_update<V: Source>(patch: &Arg<V>) -> Result<PoolUpdate> {
  let allocations = patch.field("allocations")?;
  let connection_ids = patch.field("connectionIds")?;
  Ok(PoolUpdate {
    name: patch.field("name")?.opt_string()?,
    group_id: patch.field("groupId")?.opt_string()?,
    allocations: allocations.unless_nullish(self::allocations)?,
    connection_ids: connection_ids.unless_nullish(strings)?,
  })
}

/// One pool of `importLegacyPools`.
pub fn legacy_pool<V: Source>(pool: &Arg<V>) -> Result<LegacyPool> {
  let allocations = pool.field("allocations")?;
  let connection_ids = pool.field("connectionIds")?;
  Ok(LegacyPool {
    id: pool.field("id")?.string()?,
    connection_id: pool.field("connectionId")?.string()?,
    name: pool.field("name")?.string()?,
    group_id: pool.field("groupId")?.opt_string()?,
    created_at: created_at(&pool.field("createdAt")?)?,
    allocations: allocations
      .unless_nullish(self::allocations)?
      .unwrap_or_default(),
    connection_ids: connection_ids.unless_nullish(strings)?.unwrap_or_default(),
  })
}

/// A legacy pool's `createdAt`: an ISO-8601 date-time of a four-digit year, stored as
/// `toISOString()` writes it (so `QuotaPoolSchema` accepts what `getPool` returns); absent
/// or empty, `None` (the import's time).
fn created_at<V: Source>(arg: &Arg<V>) -> Result<Option<String>> {
  let Some(text) = arg.opt_string()?.filter(|text| !text.is_empty()) else {
    return Ok(None);
  };
  const YEARS_0000_TO_9999: std::ops::RangeInclusive<i64> =
    -62_167_219_200_000..=253_402_300_799_999;
  match parse_iso8601_ms(&text).filter(|ms| YEARS_0000_TO_9999.contains(ms)) {
    Some(ms) => Ok(Some(crate::store::iso_time::iso_from_ms(ms))),
    None => Err(QuotaError::range_error(
      arg.path.to_string(),
      format!("must be an ISO-8601 date-time, got {text:?}"),
    )),
  }
}

pub fn dimension<V: Source>(arg: &Arg<V>) -> Result<QuotaDimension> {
  Ok(QuotaDimension {
    unit: unit(&arg.field("unit")?)?,
    window: window(&arg.field("window")?)?,
    limit: arg.field("limit")?.number()?,
  })
}

/// `upsertProviderPlan`'s plan.
pub fn provider_plan<V: Source>(plan: &Arg<V>) -> Result<ProviderPlan> {
  let source = plan.field("source")?;
  Ok(ProviderPlan {
    connection_id: Some(plan.field("connectionId")?.string()?),
    provider: plan.field("provider")?.string()?,
    dimensions: plan.field("dimensions")?.list(dimension)?,
    source: match source.opt_string()? {
      Some(s) => PlanSource::parse(&s).ok_or_else(|| {
        QuotaError::range_error(
          source.path.to_string(),
          format!("unknown source {s:?} (expected auto or manual)"),
        )
      })?,
      None => PlanSource::Manual,
    },
  })
}

/// `setModelCap`'s cap.
pub fn model_cap<V: Source>(cap: &Arg<V>) -> Result<ModelCap> {
  let cap_unit = cap.field("capUnit")?;
  Ok(ModelCap {
    pool_id: cap.field("poolId")?.string()?,
    api_key_id: cap.field("apiKeyId")?.string()?,
    model: cap.field("model")?.string()?,
    cap_value: cap.field("capValue")?.number()?,
    cap_unit: unit(&cap_unit)?,
  })
}

// ---- the counter stores (docs/contract.md §4) -------------------------------------------

/// A `DimensionKey` (`{ poolId, unit, window }`).
pub fn dimension_key<V: Source>(arg: &Arg<V>) -> Result<DimensionKey> {
  Ok(DimensionKey::new(
    arg.field("poolId")?.string()?,
    unit(&arg.field("unit")?)?,
    window(&arg.field("window")?)?,
  ))
}

/// A `QuotaUnit` (`tokens`, `requests`, `usd`, `percent`).
pub fn unit<V: Source>(arg: &Arg<V>) -> Result<QuotaUnit> {
  arg.parsed(QuotaUnit::parse_field)
}

/// A `QuotaWindow` (`hourly`, `daily`, …).
pub fn window<V: Source>(arg: &Arg<V>) -> Result<QuotaWindow> {
  arg.parsed(QuotaWindow::parse_field)
}

/// `planDims` of `poolUsage` (`null`/absent: none). Units and windows stay strings:
/// unknown ones are skipped by the snapshot, not rejected.
pub fn plan_dimensions<V: Source>(list: &Arg<V>) -> Result<Vec<PlanDimension>> {
  let dims = list.unless_nullish(|list| {
    list.list(|d| {
      Ok(PlanDimension {
        unit: d.field("unit")?.opt_string()?.unwrap_or_default(),
        window: d.field("window")?.opt_string()?.unwrap_or_default(),
        limit: d.field("limit")?.opt_number()?.unwrap_or(0.0),
      })
    })
  })?;
  Ok(dims.unwrap_or_default())
}

/// The words of a raw Redis command: strings, and numbers as JavaScript's `String(n)`
/// gives them (for integers at least).
pub fn command_words<V: Source>(args: &Arg<V>) -> Result<Vec<String>> {
  args.list(|a| match a.opt_number() {
    Ok(Some(n)) if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER => Ok(format!("{}", n as i64)),
    Ok(Some(n)) => Ok(format!("{n}")),
    _ => a.string(),
  })
}

// ---- decideFairShare (docs/contract.md §3) ----------------------------------------------

fn breakdown<V: Source>(arg: &Arg<V>) -> Result<WindowBreakdown> {
  Ok(WindowBreakdown {
    now_ms: arg.field("nowMs")?.number()? as i64,
    key_prev: arg.field("keyPrev")?.number()?,
    key_curr: arg.field("keyCurr")?.number()?,
    pool_prev: arg.field("poolPrev")?.number()?,
    pool_curr: arg.field("poolCurr")?.number()?,
  })
}

fn fair_share_dimension<V: Source>(arg: &Arg<V>) -> Result<DimensionInput> {
  Ok(DimensionInput {
    key: dimension_key(&arg.field("key")?)?,
    limit: arg.field("limit")?.number()?,
    consumed_total: arg.field("consumedTotal")?.number()?,
    global_used_percent: arg.field("globalUsedPercent")?.number()?,
    breakdown: arg.field("buckets")?.unless_nullish(breakdown)?,
  })
}

fn fair_share_allocation<V: Source>(arg: &Arg<V>) -> Result<AllocationInput> {
  let cap_unit_arg = arg.field("capUnit")?;
  let cap_unit = cap_unit_arg.opt_parsed(QuotaUnit::parse_field)?;
  // An unknown (or missing) policy decides like `hard`: fail-safe, never an error.
  let policy = arg
    .field("policy")?
    .opt_string()
    .ok()
    .flatten()
    .map_or(Policy::Hard, |p| Policy::parse_lenient(&p));
  Ok(AllocationInput {
    weight: arg.field("weight")?.number()?,
    cap_value: arg.field("capValue")?.opt_number()?,
    cap_unit,
    policy,
  })
}

/// `decideFairShare(input)`: the input read field by field, then decided.
pub fn decide<V: Source>(input: &Arg<V>) -> Result<FairShareDecision> {
  let dimensions = input.field("dimensions")?.list(fair_share_dimension)?;
  let allocation = fair_share_allocation(&input.field("allocation")?)?;
  let consumed_map = input.field("consumedByThisKey")?;
  let consumed = if consumed_map.is_nullish() {
    Vec::new()
  } else {
    dimensions
      .iter()
      .map(|dim| {
        let key = dim.key.to_string();
        let value = consumed_map.field(&key)?;
        Ok(value.opt_number()?.unwrap_or(0.0))
      })
      .collect::<Result<Vec<_>>>()?
  };
  let saturation_threshold = input.field("saturationThreshold")?.number()?;
  Ok(decide_fair_share(&FairShareInput {
    dimensions: &dimensions,
    allocation: &allocation,
    consumed_by_this_key: &consumed,
    saturation_threshold,
  }))
}

// ---- burn rate (docs/contract.md §9) ----------------------------------------------------

/// `computeBurnRate(history, remaining?)`.
pub fn burn_rate<V: Source>(history: &Arg<V>, remaining: &Arg<V>) -> Result<BurnRate> {
  let history = history.list(|sample| {
    Ok((
      sample.field("ts")?.number()?,
      sample.field("consumed")?.number()?,
    ))
  })?;
  Ok(compute_burn_rate(&history, remaining.opt_number()?))
}

/// `computeBurnRateFromWindow(consumedTotal, windowMs, remaining?)`, at the clock.
pub fn burn_rate_from_window<V: Source>(
  consumed_total: &Arg<V>,
  window_ms: &Arg<V>,
  remaining: &Arg<V>,
) -> Result<BurnRate> {
  let consumed_total = consumed_total.number()?;
  let window_ms = window_ms.number()?;
  let remaining = remaining.opt_number()?;
  // No window (0 or less) is a zero input, as the host's module has it.
  if window_ms <= 0.0 {
    return Ok(BurnRate::ZERO);
  }
  let window_ms = window_length_ms(window_ms).ok_or_else(|| {
    QuotaError::range_error(
      "windowMs",
      format!(
        "must be 0 or less (no window) or a finite number >= 1, got {}",
        JsNumber(window_ms)
      ),
    )
  })?;
  Ok(compute_burn_rate_from_window(
    consumed_total,
    window_ms,
    now_ms(),
    remaining,
  ))
}

// ---- the combo scheduler (docs/contract.md §10) -----------------------------------------

/// A time argument in epoch ms: `Date.now()` when absent (`undefined`/`null`), else a
/// finite number, floored to whole milliseconds (which keeps every `>=` against a whole
/// millisecond exactly as JavaScript compares).
pub fn time<V: Source>(arg: &Arg<V>) -> Result<i64> {
  match arg.opt_number()? {
    None => Ok(now_ms()),
    // The path is written out only for the error.
    Some(ms) => time_from_f64(ms, "").or_else(|_| time_from_f64(ms, &arg.path.to_string())),
  }
}

/// A finite number of epoch ms, floored.
pub fn time_from_f64(ms: f64, field: &str) -> Result<i64> {
  if ms.is_finite() {
    Ok(ms.floor() as i64)
  } else {
    Err(QuotaError::range_error(
      field,
      format!(
        "must be a finite number of milliseconds, got {}",
        JsNumber(ms)
      ),
    ))
  }
}

/// A connection id: `None` for `undefined`, `null` or `""` (no connection: nothing is
/// stored for it), else the string; any other type is a `TypeError`.
pub fn connection_id<V: Source>(arg: &Arg<V>) -> Result<Option<String>> {
  Ok(arg.opt_string()?.filter(|id| !id.is_empty()))
}

/// A number; anything else reads as NaN (not finite, as `Number.isFinite` says).
pub fn number_or_nan<V: Source>(arg: &Arg<V>) -> Result<f64> {
  Ok(arg.number().unwrap_or(f64::NAN))
}

/// `leaseMs` of `incrementInflight`: the scheduler's default lease when absent, else a
/// finite number >= 0 (floored).
pub fn lease<V: Source>(arg: &Arg<V>) -> Result<i64> {
  match arg.opt_number()? {
    None => Ok(crate::core::scheduler::inflight::DEFAULT_LEASE_MS),
    Some(ms) if ms.is_finite() && ms >= 0.0 => Ok(ms.floor() as i64),
    Some(ms) => Err(QuotaError::range_error(
      "leaseMs",
      format!("must be a finite number >= 0, got {}", JsNumber(ms)),
    )),
  }
}

/// `resetAt` of `recordUsage`: an ISO-8601 string, or `null`/`undefined`/`""` for unknown.
pub fn reset_at<V: Source>(arg: &Arg<V>) -> Result<Option<i64>> {
  let Some(text) = arg.opt_string()?.filter(|text| !text.is_empty()) else {
    return Ok(None);
  };
  parse_iso8601_ms(&text).map(Some).ok_or_else(|| {
    QuotaError::range_error(
      arg.path.to_string(),
      format!("not an ISO-8601 timestamp: {text:?}"),
    )
  })
}

fn lenient_number<V: Source>(entry: &Arg<V>, name: &str) -> Option<f64> {
  entry.field(name).ok()?.number().ok()
}

/// One quota entry of a usage reading, or `None` when it is malformed: not an object, or
/// a `resetAt` that is neither absent, `null`, `""` nor an ISO-8601 string.
fn quota_reading<V: Source>(entry: &Arg<V>) -> Option<QuotaReading> {
  if !entry.is_object() {
    return None;
  }
  let reset_at = match entry.field("resetAt").ok()?.opt_string().ok()? {
    Some(text) if !text.is_empty() => Some(parse_iso8601_ms(&text)?),
    _ => None,
  };
  Some(QuotaReading {
    used: lenient_number(entry, "used"),
    total: lenient_number(entry, "total"),
    remaining: lenient_number(entry, "remaining"),
    remaining_percentage: lenient_number(entry, "remainingPercentage"),
    unlimited: entry
      .field("unlimited")
      .and_then(|a| a.boolean())
      .unwrap_or(false),
    reset_at,
  })
}

/// The well-formed quota entries of a usage reading (`{ quotas: { [name]: … } }`), by
/// name in property order; `None` (no reading at all) for a `null`/`undefined` reading or
/// `quotas`.
pub fn quota_readings<V: Source>(usage: &Arg<V>) -> Result<Option<Vec<(String, QuotaReading)>>> {
  if usage.is_nullish() {
    return Ok(None);
  }
  let quotas = usage.field("quotas")?;
  if quotas.is_nullish() {
    return Ok(None);
  }
  let names = quotas.keys()?;
  let mut readings = Vec::with_capacity(names.len());
  for name in names {
    if let Some(reading) = quota_reading(&quotas.field(&name)?) {
      readings.push((name, reading));
    }
  }
  Ok(Some(readings))
}

/// The saturation (0..1) a test seam's usage reading gives `window`, read as the host's
/// module reads it: for anthropic (`plan_window`), the plan window's
/// `quotas["session (5h)"]` (`5h`) or `quotas["weekly (7d)"]` (`weekly`, `monthly`)
/// `.used`, in percent; for any other provider, `percentUsed`, else `used_percent`, as a
/// share. `None` when it gives none (then the caller's fallback applies).
pub fn usage_saturation<V: Source>(usage: &Arg<V>, window: &str, plan_window: bool) -> Option<f64> {
  let share = if plan_window {
    let name = match window {
      "5h" => "session (5h)",
      "weekly" | "monthly" => "weekly (7d)",
      _ => return None,
    };
    let quotas = usage.field("quotas").ok()?;
    let entry = quotas.field(name).ok()?;
    lenient_number(&entry, "used")? / 100.0
  } else {
    lenient_number(usage, "percentUsed").or_else(|| lenient_number(usage, "used_percent"))?
  };
  share.is_finite().then(|| share.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
  use super::*;

  /// A value without a JavaScript runtime.
  #[derive(Clone)]
  enum Fake {
    Null,
    Num(f64),
    Str(&'static str),
    Obj(Vec<(&'static str, Fake)>),
    List(Vec<Fake>),
    /// `new Array(n)`: `n` holes, of which only the first may be read.
    Holes(u32),
  }

  impl Source for Fake {
    fn kind(&self) -> std::result::Result<Kind, Fault> {
      Ok(match self {
        Fake::Null => Kind::Null,
        Fake::Num(_) => Kind::Number,
        Fake::Str(_) => Kind::String,
        Fake::Obj(_) | Fake::List(_) | Fake::Holes(_) => Kind::Object,
      })
    }
    fn number(&self) -> std::result::Result<f64, Fault> {
      match self {
        Fake::Num(n) => Ok(*n),
        _ => Err("not a number".into()),
      }
    }
    fn string(&self) -> std::result::Result<String, Fault> {
      match self {
        Fake::Str(s) => Ok(s.to_string()),
        _ => Err("not a string".into()),
      }
    }
    fn boolean(&self) -> std::result::Result<bool, Fault> {
      Err("no booleans here".into())
    }
    fn property(&self, name: &str) -> std::result::Result<Option<(Self, Kind)>, Fault> {
      match self {
        Fake::Obj(fields) => fields
          .iter()
          .find(|(k, _)| *k == name)
          .map(|(_, v)| Ok((v.clone(), v.kind()?)))
          .transpose(),
        _ => Ok(None),
      }
    }
    fn is_array(&self) -> std::result::Result<bool, Fault> {
      Ok(matches!(self, Fake::List(_) | Fake::Holes(_)))
    }
    fn length(&self) -> std::result::Result<u32, Fault> {
      match self {
        Fake::List(items) => Ok(items.len() as u32),
        Fake::Holes(length) => Ok(*length),
        _ => Err("not an array".into()),
      }
    }
    fn element(&self, index: u32) -> std::result::Result<Option<(Self, Kind)>, Fault> {
      match self {
        Fake::List(items) => items
          .get(index as usize)
          .map(|v| Ok((v.clone(), v.kind()?)))
          .transpose(),
        Fake::Holes(_) if index == 0 => Ok(None),
        Fake::Holes(_) => panic!("element {index} read after a bad element 0"),
        _ => Err("not an array".into()),
      }
    }
    fn keys(&self) -> std::result::Result<Vec<String>, Fault> {
      match self {
        Fake::Obj(fields) => Ok(fields.iter().map(|(k, _)| k.to_string()).collect()),
        _ => Ok(Vec::new()),
      }
    }
  }

  #[test]
  fn a_db_path_resolver_answer_is_its_string_or_what_is_wrong_with_it() {
    assert_eq!(
      resolved_path(&Fake::Str("/data/x.sqlite")),
      Ok("/data/x.sqlite".into())
    );
    let wrong = |v: Fake| resolved_path(&v).unwrap_err();
    assert_eq!(wrong(Fake::Null), "returned null instead of a string");
    assert_eq!(
      wrong(Fake::Num(1.0)),
      "returned a number instead of a string"
    );
    assert_eq!(
      wrong(Fake::Obj(vec![])),
      "returned an object instead of a string"
    );
  }

  /// The error's class (`Type` or `Range`) and message.
  fn message(err: QuotaError) -> (String, String) {
    let kind = match &err {
      QuotaError::InvalidArg { kind, .. } => format!("{kind:?}"),
      other => format!("{other:?}"),
    };
    (kind, err.to_string())
  }

  #[test]
  fn every_error_names_the_path_of_the_bad_value() {
    let dims = Fake::List(vec![Fake::Obj(vec![
      ("unit", Fake::Str("tokens")),
      ("window", Fake::Str("5h")),
      ("limit", Fake::Str("10")),
    ])]);
    let plan = Fake::Obj(vec![
      ("connectionId", Fake::Str("c")),
      ("provider", Fake::Str("p")),
      ("dimensions", dims),
    ]);
    let err = provider_plan(&Arg::new(plan, "plan").unwrap()).unwrap_err();
    assert_eq!(
      message(err),
      (
        "Type".into(),
        "plan.dimensions[0].limit: expected a number, got string".into()
      )
    );
    let err = dimension_key(&Arg::new(Fake::Null, "key").unwrap()).unwrap_err();
    assert_eq!(message(err).1, "key: expected an object, got null");
    // A name the engine does not know: the path is written out for the parse's error too.
    let dims = Fake::List(vec![
      Fake::Obj(vec![
        ("unit", Fake::Str("tokens")),
        ("window", Fake::Str("5h")),
        ("limit", Fake::Num(1.0)),
      ]),
      Fake::Obj(vec![("unit", Fake::Str("parsecs"))]),
    ]);
    let err = Arg::new(dims, "dims").unwrap().list(dimension).unwrap_err();
    assert_eq!(
      message(err),
      (
        "Range".into(),
        "dims[1].unit: unknown unit \"parsecs\" (expected percent, requests, tokens or usd)".into()
      )
    );
  }

  #[test]
  fn an_arrays_length_sizes_nothing_and_the_first_bad_element_ends_the_read() {
    let read = |length| {
      let dims = Arg::new(Fake::Holes(length), "dims").unwrap();
      message(dims.list(dimension).unwrap_err())
    };
    assert_eq!(
      read(u32::MAX),
      (
        "Range".into(),
        "dims: must have at most 65536 elements, got 4294967295".into()
      )
    );
    assert_eq!(read(MAX_ELEMENTS + 1).0, "Range");
    // `Fake::Holes` panics if an element after the first is read.
    let first_hole = (
      "Type".into(),
      "dims[0]: expected an object, got undefined".into(),
    );
    assert_eq!(read(MAX_ELEMENTS), first_hole);
    assert_eq!(read(3), first_hole);
  }

  #[test]
  fn numbers_are_checked_for_range_with_their_path() {
    let bucket = Arg::new(Fake::Num(1.5), "bucketIndex").unwrap();
    let (kind, text) = message(bucket.integer().unwrap_err());
    assert_eq!(kind, "Range");
    assert_eq!(
      text,
      "bucketIndex: must be an integer from -(2^53 - 1) to 2^53 - 1, got 1.5"
    );
    let lease = Arg::new(Fake::Num(-1.0), "leaseMs").unwrap();
    assert_eq!(
      message(super::lease(&lease).unwrap_err()).1,
      "leaseMs: must be a finite number >= 0, got -1"
    );
    assert_eq!(
      super::lease(&Arg::<Fake>::maybe(None, "leaseMs").unwrap()),
      Ok(crate::core::scheduler::inflight::DEFAULT_LEASE_MS)
    );
    assert_eq!(time(&Arg::new(Fake::Num(10.9), "nowMs").unwrap()), Ok(10));
  }

  #[test]
  fn absent_and_null_values_take_their_defaults() {
    let none = Arg::<Fake>::maybe(None, "planDims").unwrap();
    assert_eq!(plan_dimensions(&none), Ok(Vec::new()));
    let options = Arg::new(Fake::Obj(vec![("limit", Fake::Num(-3.0))]), "options").unwrap();
    assert_eq!(page(&options), Ok((None, None)));
    let words = Fake::List(vec![Fake::Str("SET"), Fake::Num(3.0), Fake::Num(0.5)]);
    let words = command_words(&Arg::new(words, "args").unwrap()).unwrap();
    assert_eq!(words, ["SET", "3", "0.5"]);
  }
}
