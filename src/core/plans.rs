//! Plans of docs/contract.md §6: the catalog of known provider plans (`planRegistry`), the
//! resolver that prefers a stored override (`planResolver`), and the parsers of the
//! `provider_plans.dimensions_json` column.

use crate::core::dimensions::{PlanSource, ProviderPlan, QuotaDimension, QuotaUnit, QuotaWindow};
use crate::error::{JsNumber, QuotaError, Result};
use serde_json::Value;
use QuotaUnit::{Percent, Requests, Tokens, Usd};
use QuotaWindow::{Daily, FiveHours, Hourly, Monthly, Weekly};

/// JavaScript's `Number.EPSILON`: a catalog limit meaning "unknown: configure manually".
pub const EPSILON: f64 = f64::EPSILON;

/// A plan of the catalog: `{ provider, dimensions }`.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownPlan {
  pub provider: &'static str,
  pub dimensions: Vec<QuotaDimension>,
}

const fn d(unit: QuotaUnit, window: QuotaWindow, limit: f64) -> QuotaDimension {
  QuotaDimension {
    unit,
    window,
    limit,
  }
}

const SUBSCRIPTION: &[QuotaDimension] = &[d(Percent, FiveHours, 100.0), d(Percent, Weekly, 100.0)];
const CODING_PLAN: &[QuotaDimension] = &[d(Tokens, FiveHours, EPSILON), d(Tokens, Weekly, EPSILON)];
const XIAOMI_MIMO: &[QuotaDimension] = &[d(Tokens, Monthly, 4_100_000_000.0)];

/// The catalog, in `knownProviders()` order. OpenAI and Anthropic API keys have no plan.
static CATALOG: &[(&str, &[QuotaDimension])] = &[
  ("codex", SUBSCRIPTION),
  ("claude", SUBSCRIPTION),
  ("glm", CODING_PLAN),
  ("minimax", CODING_PLAN),
  ("kimi-coding", CODING_PLAN),
  ("deepseek", &[d(Usd, Monthly, EPSILON)]),
  (
    "bailian",
    &[
      d(Percent, FiveHours, 100.0),
      d(Percent, Weekly, 100.0),
      d(Percent, Monthly, 100.0),
    ],
  ),
  ("kimi", &[d(Requests, Hourly, 1500.0)]),
  ("xiaomi-mimo", XIAOMI_MIMO),
  ("xiaomi-mimo-token-plan", XIAOMI_MIMO),
  ("alibaba", &[d(Requests, Monthly, 90_000.0)]),
  (
    "grok-cli",
    &[
      d(Requests, Daily, 864.0),
      d(Tokens, Daily, 18_000_000.0),
      d(Requests, Weekly, 6048.0),
      d(Tokens, Weekly, 126_000_000.0),
    ],
  ),
];

/// `getKnownPlan(provider)`: the catalog's plan for `provider` (exact, case-sensitive
/// name), or `None`.
pub fn known_plan(provider: &str) -> Option<KnownPlan> {
  CATALOG
    .iter()
    .find(|(name, _)| *name == provider)
    .map(|(name, dimensions)| KnownPlan {
      provider: name,
      dimensions: dimensions.to_vec(),
    })
}

/// `knownProviders()`: every provider of the catalog, in catalog order.
pub fn known_providers() -> Vec<&'static str> {
  CATALOG.iter().map(|(name, _)| *name).collect()
}

/// The stored per-connection plan (`provider_plans`), implemented by the SQLite store.
pub trait PlanOverrides {
  /// The override row for `connection_id`, if any.
  fn provider_plan(&self, connection_id: &str) -> Result<Option<ProviderPlan>>;
}

/// `resolvePlan(connectionId, provider)`, which never fails:
/// 1. a stored plan with at least one dimension → that plan (its own connection id and
///    source); a failing override lookup counts as "no row";
/// 2. the catalog → `connection_id: None`, source `auto`;
/// 3. `{ connection_id: None, provider, dimensions: [], source: manual }`.
pub fn resolve_plan(
  overrides: &dyn PlanOverrides,
  connection_id: &str,
  provider: &str,
) -> ProviderPlan {
  let stored = overrides.provider_plan(connection_id).ok().flatten();
  if let Some(plan) = stored.filter(|p| !p.dimensions.is_empty()) {
    return plan;
  }
  let known = known_plan(provider);
  ProviderPlan {
    connection_id: None,
    provider: provider.to_string(),
    source: match known {
      Some(_) => PlanSource::Auto,
      None => PlanSource::Manual,
    },
    dimensions: known.map(|plan| plan.dimensions).unwrap_or_default(),
  }
}

/// Parses a JSON array of `{ unit, window, limit }` strictly (user input, a column about
/// to be written). Unknown keys are ignored. Errors name the offending value, e.g.
/// `dimensions[2].limit`: a `TypeError` for a wrong JSON type (or text that is not JSON),
/// a `RangeError` for an unknown unit or window, or a limit that is not a finite number
/// greater than 0. An empty array is accepted; a caller that needs at least one dimension
/// checks that itself.
pub fn parse_plan_dimensions(json: &str, field: &str) -> Result<Vec<QuotaDimension>> {
  let value: Value = serde_json::from_str(json)
    .map_err(|e| QuotaError::type_error(field, format!("not valid JSON ({e})")))?;
  let items = value
    .as_array()
    .ok_or_else(|| wrong_type(field, "an array of { unit, window, limit }", Some(&value)))?;
  let dimensions = items
    .iter()
    .enumerate()
    .map(|(i, item)| parse_dimension(item, &format!("{field}[{i}]")))
    .collect::<Result<Vec<_>>>()?;
  Ok(merge_repeated(dimensions))
}

/// One dimension per (unit, window), in first-seen order, at the smallest limit named: a
/// plan that names one twice would count every request on its one counter twice (and
/// reserve it twice).
fn merge_repeated(dimensions: impl IntoIterator<Item = QuotaDimension>) -> Vec<QuotaDimension> {
  let mut merged: Vec<QuotaDimension> = Vec::new();
  for dimension in dimensions {
    match merged
      .iter_mut()
      .find(|d| (d.unit, d.window) == (dimension.unit, dimension.window))
    {
      Some(kept) => kept.limit = kept.limit.min(dimension.limit),
      None => merged.push(dimension),
    }
  }
  merged
}

fn parse_dimension(item: &Value, path: &str) -> Result<QuotaDimension> {
  let object = item
    .as_object()
    .ok_or_else(|| wrong_type(path, "an object", Some(item)))?;
  let string_field = |name: &str| -> Result<(&str, String)> {
    let path = format!("{path}.{name}");
    match object.get(name) {
      Some(Value::String(s)) => Ok((s.as_str(), path)),
      other => Err(wrong_type(&path, "a string", other)),
    }
  };
  let (unit, unit_path) = string_field("unit")?;
  let unit = QuotaUnit::parse_field(unit, &unit_path)?;
  let (window, window_path) = string_field("window")?;
  let window = QuotaWindow::parse_field(window, &window_path)?;
  let limit_path = format!("{path}.limit");
  let limit = match object.get("limit") {
    Some(Value::Number(n)) => n.as_f64().ok_or_else(|| {
      QuotaError::range_error(&limit_path, "must be a finite number greater than 0")
    })?,
    other => return Err(wrong_type(&limit_path, "a number", other)),
  };
  if !(limit.is_finite() && limit > 0.0) {
    return Err(QuotaError::range_error(
      &limit_path,
      format!(
        "must be a finite number greater than 0, got {}",
        JsNumber(limit)
      ),
    ));
  }
  Ok(QuotaDimension {
    unit,
    window,
    limit,
  })
}

/// Parses a stored `dimensions_json` for reading: entries that are not objects, or have an
/// unknown unit or window, or a limit that is not a finite number greater than 0, are
/// skipped; text that is not a JSON array gives an empty list. Never fails.
pub fn parse_plan_dimensions_lenient(json: &str) -> Vec<QuotaDimension> {
  let Ok(Value::Array(items)) = serde_json::from_str::<Value>(json) else {
    return Vec::new();
  };
  let read = |item: &Value| {
    let object = item.as_object()?;
    let unit = QuotaUnit::parse(object.get("unit")?.as_str()?)?;
    let window = QuotaWindow::parse(object.get("window")?.as_str()?)?;
    let limit = object.get("limit")?.as_f64()?;
    (limit.is_finite() && limit > 0.0).then_some(QuotaDimension {
      unit,
      window,
      limit,
    })
  };
  merge_repeated(items.iter().filter_map(read))
}

/// A `TypeError` at `path`: `expected <what>, got <the JSON type of value>`.
fn wrong_type(path: &str, what: &str, value: Option<&Value>) -> QuotaError {
  let got = value.map_or("nothing", json_type);
  QuotaError::type_error(path, format!("expected {what}, got {got}"))
}

fn json_type(value: &Value) -> &'static str {
  match value {
    Value::Null => "null",
    Value::Bool(_) => "a boolean",
    Value::Number(_) => "a number",
    Value::String(_) => "a string",
    Value::Array(_) => "an array",
    Value::Object(_) => "an object",
  }
}

// Tested in tests/plans.rs.
