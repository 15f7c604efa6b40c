//! The plan catalog, the plan resolver and the plan JSON parsers (`core/plans.rs`).

use omniroute_quota_engine::core::dimensions::{
  PlanSource, ProviderPlan, QuotaDimension, QuotaUnit, QuotaWindow,
};
use omniroute_quota_engine::core::plans::*;
use PlanSource::{Auto, Manual};
use QuotaUnit::{Requests, Tokens};
use QuotaWindow::{Daily, FiveHours, Hourly};

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
  // An override without dimensions counts as no override.
  let empty = plan(Some("conn-1"), "kimi", &[], Manual);
  let cases = [
    (Some(manual.clone()), "codex", &manual),
    (Some(auto.clone()), "codex", &auto),
    (None, "kimi", &kimi),
    (Some(empty), "kimi", &kimi),
    (None, "openai", &none),
  ];
  for (stored, provider, expected) in cases {
    assert_eq!(&resolve_plan(stored, provider), expected);
  }
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
fn the_catalog_round_trips_through_json() {
  for name in known_providers() {
    let dims = known_plan(name).unwrap().dimensions;
    let json: Vec<_> = dims
      .iter()
      .map(|d| serde_json::json!({ "unit": d.unit.as_str(), "window": d.window.as_str(), "limit": d.limit }))
      .collect();
    let json = serde_json::Value::from(json).to_string();
    assert_eq!(parse_plan_dimensions_lenient(&json), dims);
  }
}
