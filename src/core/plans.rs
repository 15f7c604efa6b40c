//! Plans of docs/contract.md §6: the catalog of known provider plans (`planRegistry`), the
//! resolver that prefers a stored override (`planResolver`), and the parsers of the
//! `provider_plans.dimensions_json` column.

use crate::core::dimensions::{PlanSource, ProviderPlan, QuotaDimension, QuotaUnit, QuotaWindow};
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

/// `resolvePlan(connectionId, provider)`, which never fails:
/// 1. the `stored` plan when it has a dimension (its own connection id and source);
/// 2. the catalog → `connection_id: None`, source `auto`;
/// 3. `{ connection_id: None, provider, dimensions: [], source: manual }`.
pub fn resolve_plan(stored: Option<ProviderPlan>, provider: &str) -> ProviderPlan {
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

// Tested in tests/plans.rs.
