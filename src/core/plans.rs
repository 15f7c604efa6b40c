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
  items
    .iter()
    .enumerate()
    .map(|(i, item)| parse_dimension(item, &format!("{field}[{i}]")))
    .collect()
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
  items
    .iter()
    .filter_map(|item| {
      let object = item.as_object()?;
      let unit = QuotaUnit::parse(object.get("unit")?.as_str()?)?;
      let window = QuotaWindow::parse(object.get("window")?.as_str()?)?;
      let limit = object.get("limit")?.as_f64()?;
      (limit.is_finite() && limit > 0.0).then_some(QuotaDimension {
        unit,
        window,
        limit,
      })
    })
    .collect()
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

#[cfg(test)]
mod tests {
  use super::*;
  use crate::error::ArgErrorKind::{self, Range, Type};
  use PlanSource::{Auto, Manual};

  /// Each plan's dimensions (and `EPSILON` being `Number.EPSILON`) are checked by "the
  /// plan catalog matches the contract" of __test__/core.test.mjs; the order is checked here.
  #[test]
  fn known_providers_are_in_catalog_order() {
    let names = "codex claude glm minimax kimi-coding deepseek bailian kimi xiaomi-mimo \
                 xiaomi-mimo-token-plan alibaba grok-cli";
    let names: Vec<&str> = names.split_whitespace().collect();
    assert_eq!(known_providers(), names);
  }

  /// `openai` and `anthropic` are core.test.mjs's; these are names a lookup must not fold.
  #[test]
  fn near_names_have_no_plan() {
    for name in ["", "Codex", "codex ", "toString", "__proto__"] {
      assert_eq!(known_plan(name), None, "{name:?}");
    }
  }

  struct Fixed(Result<Option<ProviderPlan>>);

  impl PlanOverrides for Fixed {
    fn provider_plan(&self, _connection_id: &str) -> Result<Option<ProviderPlan>> {
      self.0.clone()
    }
  }

  fn plan(
    id: Option<&str>,
    provider: &str,
    dims: &[QuotaDimension],
    source: PlanSource,
  ) -> ProviderPlan {
    ProviderPlan {
      connection_id: id.map(String::from),
      provider: provider.into(),
      dimensions: dims.to_vec(),
      source,
    }
  }

  #[test]
  fn resolve_takes_a_non_empty_override_then_the_catalog_then_an_empty_manual_plan() {
    let manual = plan(Some("conn-1"), "codex", &[d(Requests, Daily, 42.0)], Manual);
    let auto = plan(Some("conn-1"), "codex", &[d(Tokens, Hourly, 7.0)], Auto);
    let kimi = plan(None, "kimi", &[d(Requests, Hourly, 1500.0)], Auto);
    let none = plan(None, "openai", &[], Manual);
    // An override without dimensions, or a failing lookup, counts as no override.
    let empty = || Fixed(Ok(Some(plan(Some("conn-1"), "kimi", &[], Manual))));
    let failing = || Fixed(Err(QuotaError::Store("disk I/O error".into())));
    let cases = [
      (Fixed(Ok(Some(manual.clone()))), "codex", &manual),
      (Fixed(Ok(Some(auto.clone()))), "codex", &auto),
      (Fixed(Ok(None)), "kimi", &kimi),
      (empty(), "kimi", &kimi),
      (failing(), "kimi", &kimi),
      (Fixed(Ok(None)), "openai", &none),
      (failing(), "openai", &none),
    ];
    for (overrides, provider, expected) in cases {
      assert_eq!(&resolve_plan(&overrides, "conn-1", provider), expected);
    }
  }

  #[test]
  fn strict_parse_accepts_valid_input() {
    let json = r#"[{"unit":"tokens","window":"5h","limit":1000},
                   {"unit":"usd","window":"monthly","limit":2.5,"extra":true}]"#;
    assert_eq!(
      parse_plan_dimensions(json, "dimensions").unwrap(),
      vec![d(Tokens, FiveHours, 1000.0), d(Usd, Monthly, 2.5)]
    );
    assert_eq!(parse_plan_dimensions("[]", "dimensions").unwrap(), vec![]);
  }

  /// `[{"unit":"tokens","window":"5h","limit":1}]` with `key`'s value (JSON text)
  /// replaced, or `key` left out (`None`).
  fn one(key: &str, value: Option<&str>) -> String {
    let fields = [
      ("unit", r#""tokens""#),
      ("window", r#""5h""#),
      ("limit", "1"),
    ];
    let members: Vec<String> = fields
      .into_iter()
      .filter_map(|(k, v)| Some(format!(r#""{k}":{}"#, if k == key { value? } else { v })))
      .collect();
    format!("[{{{}}}]", members.join(","))
  }

  #[test]
  fn strict_parse_names_the_field() {
    let third = r#"[{"unit":"tokens","window":"5h","limit":1},
                    {"unit":"tokens","window":"daily","limit":2},
                    {"unit":"requests","window":"hourly","limit":-0.0}]"#;
    // The field is `d`; serde_json refuses 1e400 rather than reading infinity.
    let cases: Vec<(String, ArgErrorKind, &str)> = vec![
      ("not json".into(), Type, "d"),
      ("".into(), Type, "d"),
      ("{\"unit\":\"tokens\"}".into(), Type, "d"),
      ("null".into(), Type, "d"),
      ("\"\u{1F4A9}\u{202E}\"".into(), Type, "d"),
      ("\u{FEFF}\u{0000}\u{1F4A9}[".into(), Type, "d"),
      (one("limit", Some("1e400")), Type, "d"),
      ("[1]".into(), Type, "d[0]"),
      (one("unit", None), Type, "d[0].unit"),
      (one("unit", Some("7")), Type, "d[0].unit"),
      (one("unit", Some(r#""bytes""#)), Range, "d[0].unit"),
      (one("window", Some(r#""yearly""#)), Range, "d[0].window"),
      (one("window", Some("null")), Type, "d[0].window"),
      (one("limit", Some(r#""1""#)), Type, "d[0].limit"),
      (one("limit", None), Type, "d[0].limit"),
      (one("limit", Some("0")), Range, "d[0].limit"),
      (one("limit", Some("-3")), Range, "d[0].limit"),
      (third.into(), Range, "d[2].limit"),
    ];
    for (json, kind, field) in cases {
      // InvalidArg is `ERR_QUOTA_INVALID_ARG`, displayed as `<field>: <message>`.
      let err = parse_plan_dimensions(&json, "d").unwrap_err();
      let named = |k: &ArgErrorKind, f: &String| (*k, f.as_str()) == (kind, field);
      assert!(
        matches!(&err, QuotaError::InvalidArg { kind: k, field: f, .. } if named(k, f)),
        "{json}: {err:?}"
      );
    }
    let message = |json: &str| parse_plan_dimensions(json, "d").unwrap_err().to_string();
    let array = "d: expected an array of { unit, window, limit }, got null";
    assert_eq!(message("null"), array);
    assert_eq!(message("[1]"), "d[0]: expected an object, got a number");
    let limit = "d[0].limit: expected a number, got nothing";
    assert_eq!(message(&one("limit", None)), limit);
  }

  #[test]
  fn lenient_parse_skips_malformed_entries() {
    let json = r#"[
      {"unit":"tokens","window":"5h","limit":1000},
      {"unit":"tokens","window":"yearly","limit":1},
      {"unit":"bytes","window":"5h","limit":1},
      {"unit":"tokens","window":"5h","limit":"12"},
      {"unit":"tokens","window":"5h"},
      {"unit":"tokens","window":"5h","limit":0},
      {"unit":"tokens","window":"5h","limit":-1},
      42, null, "x", [],
      {"unit":"requests","window":"daily","limit":864}
    ]"#;
    assert_eq!(
      parse_plan_dimensions_lenient(json),
      vec![d(Tokens, FiveHours, 1000.0), d(Requests, Daily, 864.0)]
    );
  }

  #[test]
  fn lenient_parse_of_garbage_is_empty() {
    for json in [
      "",
      "not json",
      "{}",
      "null",
      "17",
      "\"[]\"",
      "\u{1F4A9}\u{202E}\u{0000}\u{FFFD}",
      "[{\"unit\":\"tokens\"",
      "[\"\u{1F4A9}\", {\"\u{00E9}\": 1}]",
    ] {
      assert_eq!(parse_plan_dimensions_lenient(json), vec![], "{json:?}");
    }
  }

  #[test]
  fn both_parsers_read_the_catalog_round_trip() {
    for name in known_providers() {
      let dims = known_plan(name).unwrap().dimensions;
      let json: Vec<_> = dims
        .iter()
        .map(|d| serde_json::json!({ "unit": d.unit.as_str(), "window": d.window.as_str(), "limit": d.limit }))
        .collect();
      let json = serde_json::Value::from(json).to_string();
      assert_eq!(parse_plan_dimensions(&json, "dimensions").unwrap(), dims);
      assert_eq!(parse_plan_dimensions_lenient(&json), dims);
    }
  }
}
