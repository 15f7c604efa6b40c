//! The plan catalog, the plan resolver and the plan JSON parsers (`core/plans.rs`).

use omniroute_quota_engine::core::dimensions::{
  PlanSource, ProviderPlan, QuotaDimension, QuotaUnit, QuotaWindow,
};
use omniroute_quota_engine::core::plans::*;
use omniroute_quota_engine::error::ArgErrorKind::{self, Range, Type};
use omniroute_quota_engine::error::{QuotaError, Result};
use PlanSource::{Auto, Manual};
use QuotaUnit::{Requests, Tokens, Usd};
use QuotaWindow::{Daily, FiveHours, Hourly, Monthly};

fn d(unit: QuotaUnit, window: QuotaWindow, limit: f64) -> QuotaDimension {
  QuotaDimension {
    unit,
    window,
    limit,
  }
}

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

/// A unit and window named twice is one dimension (one counter) at the smaller limit.
#[test]
fn lenient_parse_skips_malformed_entries_and_merges_repeated_ones() {
  let json = r#"[
    {"unit":"tokens","window":"5h","limit":1000},
    {"unit":"tokens","window":"yearly","limit":1},
    {"unit":"bytes","window":"5h","limit":1},
    {"unit":"tokens","window":"5h","limit":"12"},
    {"unit":"tokens","window":"5h"},
    {"unit":"tokens","window":"5h","limit":0},
    {"unit":"tokens","window":"5h","limit":-1},
    42, null, "x", [],
    {"unit":"requests","window":"daily","limit":864},
    {"unit":"tokens","window":"5h","limit":700},
    {"unit":"requests","window":"daily","limit":900}
  ]"#;
  assert_eq!(
    parse_plan_dimensions_lenient(json),
    vec![d(Tokens, FiveHours, 700.0), d(Requests, Daily, 864.0)]
  );
  // The strict reader merges them the same way (what the fuzz checks: it keeps what the
  // lenient one keeps).
  let repeated = r#"[{"unit":"requests","window":"hourly","limit":1481.9},
    {"unit":"requests","window":"hourly","limit":1.5e270}]"#;
  assert_eq!(
    parse_plan_dimensions(repeated, "dimensions").unwrap(),
    parse_plan_dimensions_lenient(repeated)
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
