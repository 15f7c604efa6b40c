//! Fuzzing the pure core with generated input: none of these may panic, whatever they are
//! given (docs/contract.md §3 "never panics"; the header and plan parsers read what upstreams and
//! the host's database hold). Each target also checks the few properties that hold for
//! *every* input (a parsed plan has only valid limits, a decision's kind matches its
//! reason, …), so a target that silently returned garbage would fail too.
//!
//! The number of cases per target comes from `FUZZ_CASES` (default 5 000, so `cargo test`
//! stays fast); `FUZZ_CASES=1000000 cargo test --release --test fuzz` is the long run
//! (`npm run fuzz`). Debug builds also trap integer overflow, which release builds wrap:
//! the default run keeps that check.

use omniroute_quota_engine::core::dimensions::{
  bucket_index, effective, elapsed_in_bucket, DimensionKey, Policy, QuotaUnit, QuotaWindow,
};
use omniroute_quota_engine::core::fair_share::{
  decay_retry_after_ms, decide_fair_share, AllocationInput, DecisionKind, DecisionReason,
  DimensionInput, FairShareInput, WindowBreakdown,
};
use omniroute_quota_engine::core::iso8601::parse_iso8601_ms;
use omniroute_quota_engine::core::plans::parse_plan_dimensions_lenient;
use omniroute_quota_engine::core::saturation::{
  parse_duration_ms, parse_rate_limit_headers, parse_reset_ms, MAX_DATE_MS,
};
use proptest::num::f64::ANY;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::Config;
use serde_json::{Map, Number, Value};

/// Cases per target: `FUZZ_CASES`, or 5 000.
fn config() -> Config {
  let cases = std::env::var("FUZZ_CASES")
    .ok()
    .and_then(|v| v.trim().replace('_', "").parse::<u32>().ok())
    .filter(|&n| n > 0)
    .unwrap_or(5_000);
  Config {
    cases,
    // A million cases of a regression file's worth of failures would only repeat them.
    max_shrink_iters: 10_000,
    ..Config::default()
  }
}

// ---- numbers and strings -------------------------------------------------------------

/// Every kind of `f64`: any bit pattern (NaN payloads, subnormals, ±∞, −0), the edges, and
/// numbers of a plausible size so that comparisons are not all decided by magnitude.
fn number() -> impl Strategy<Value = f64> {
  prop_oneof![
    3 => ANY,
    3 => -10.0..2000.0f64,
    1 => select(vec![
      0.0,
      -0.0,
      1.0,
      100.0,
      f64::EPSILON,
      f64::MIN_POSITIVE,
      f64::MAX,
      f64::MIN,
      f64::INFINITY,
      f64::NEG_INFINITY,
      f64::NAN,
    ]),
  ]
}

/// Any `i64`, with the edges and realistic epoch milliseconds weighted up.
fn instant() -> impl Strategy<Value = i64> {
  prop_oneof![
    2 => any::<i64>(),
    2 => 0i64..4_102_444_800_000,
    1 => select(vec![i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX]),
  ]
}

/// Arbitrary text: any Unicode (control characters, surrogates' neighbours, combining
/// marks, the BOM), or short ASCII that collides with the grammar more often.
fn text() -> impl Strategy<Value = String> {
  prop_oneof![
    2 => any::<String>(),
    2 => "[ -~]{0,24}",
    1 => "[0-9.:+\\-TZtzhmsµnu ]{0,32}",
    1 => prop::collection::vec(any::<char>(), 0..8).prop_map(|c| c.into_iter().collect()),
  ]
}

// ---- decide_fair_share ---------------------------------------------------------------

fn breakdown() -> impl Strategy<Value = WindowBreakdown> {
  (instant(), number(), number(), number(), number()).prop_map(
    |(now_ms, key_prev, key_curr, pool_prev, pool_curr)| WindowBreakdown {
      now_ms,
      key_prev,
      key_curr,
      pool_prev,
      pool_curr,
    },
  )
}

fn dimension() -> impl Strategy<Value = DimensionInput> {
  (
    text(),
    select(QuotaUnit::ALL.to_vec()),
    select(QuotaWindow::ALL.to_vec()),
    (number(), number(), number()),
    prop::option::of(breakdown()),
  )
    .prop_map(
      |(pool, unit, window, (limit, consumed_total, global_used_percent), breakdown)| {
        DimensionInput {
          key: DimensionKey::new(pool, unit, window),
          limit,
          consumed_total,
          global_used_percent,
          breakdown,
        }
      },
    )
}

fn allocation() -> impl Strategy<Value = AllocationInput> {
  (
    number(),
    prop::option::of(number()),
    prop::option::of(select(QuotaUnit::ALL.to_vec())),
    // The policy as the store reads it: any text, leniently (unknown → hard).
    prop_oneof![
      select(vec!["hard", "soft", "burst"]).prop_map(String::from),
      text()
    ],
  )
    .prop_map(|(weight, cap_value, cap_unit, policy)| AllocationInput {
      weight,
      cap_value,
      cap_unit,
      policy: Policy::parse_lenient(&policy),
    })
}

// ---- rate-limit headers --------------------------------------------------------------

/// A header name: the real ones (in any case), near misses, and arbitrary Unicode.
fn header_name() -> impl Strategy<Value = String> {
  let family = select(vec![
    "requests",
    "tokens",
    "input-tokens",
    "output-tokens",
    "",
    "-",
    "tokens-",
  ]);
  let field = select(vec!["limit", "remaining", "reset", "", "-", "resets"]);
  prop_oneof![
    2 => (family.clone(), field.clone()).prop_map(|(fam, fld)| format!("anthropic-ratelimit-{fam}-{fld}")),
    2 => (field, family).prop_map(|(fld, fam)| format!("x-ratelimit-{fld}-{fam}")),
    1 => (select(vec!["anthropic-ratelimit-", "x-ratelimit-", "X-RateLimit-", "ANTHROPIC-RATELIMIT-"]), text())
      .prop_map(|(prefix, rest)| format!("{prefix}{rest}")),
    1 => text(),
    // Case folding must not split a multi-byte character (`İ`, `ß`, `ﬁ` change length
    // when lowercased by Unicode rules; ASCII lowercasing must leave them alone).
    1 => (text(), select(vec!["İ", "ẞ", "ﬁ", "Ω", "K", "\u{0301}", "\u{feff}"]))
      .prop_map(|(rest, odd)| format!("x-ratelimit-{odd}{rest}")),
  ]
}

/// A header value: numbers, durations, instants, and arbitrary Unicode.
fn header_value() -> impl Strategy<Value = String> {
  prop_oneof![
    2 => number().prop_map(|n| n.to_string()),
    2 => duration_text(),
    2 => instant_text(),
    2 => text(),
  ]
}

/// Durations in the Go style, valid and not: `6m0s`, `1h2m3.5s`, `1e400s`, `..s`, `9999…h`.
fn duration_text() -> impl Strategy<Value = String> {
  let part = (
    prop_oneof![
      "[0-9]{1,30}",
      "[0-9]{0,5}\\.[0-9]{0,5}",
      "\\.+",
      Just("1e400".to_string())
    ],
    select(vec![
      "h", "m", "s", "ms", "us", "µs", "ns", "", "d", "µ", "S",
    ]),
  )
    .prop_map(|(n, u)| format!("{n}{u}"));
  prop::collection::vec(part, 1..5).prop_map(|parts| parts.concat())
}

/// RFC 3339 / ISO-8601 text, valid and not: extreme years, leap days, `24:00`, offsets,
/// long fractions, and arbitrary bytes in each field.
fn instant_text() -> impl Strategy<Value = String> {
  let year = prop_oneof![
    "[0-9]{4}",
    "[+-][0-9]{6}",
    Just("+999999".to_string()),
    Just("-999999".to_string()),
    Just("-000000".to_string()),
    "[0-9]{0,8}",
  ];
  let two = prop_oneof![3 => "[0-9]{2}", 1 => "[0-9]{0,3}", 1 => text()];
  let sep = select(vec!["T", "t", " ", "", "X"]);
  let fraction = prop_oneof![Just(String::new()), "\\.[0-9]{0,20}"];
  let zone = prop_oneof![
    Just("Z".to_string()),
    Just("z".to_string()),
    "[+-][0-9]{2}:[0-9]{2}",
    "[+-][0-9]{4}",
    "[+-][0-9]{0,3}",
    Just(String::new()),
    text(),
  ];
  (
    year,
    (two.clone(), two.clone()),
    sep,
    (two.clone(), two.clone(), two),
    fraction,
    zone,
  )
    .prop_map(|(y, (mo, d), sep, (h, mi, s), f, z)| format!("{y}-{mo}-{d}{sep}{h}:{mi}:{s}{f}{z}"))
}

// ---- plan JSON -----------------------------------------------------------------------

/// A JSON number of any size, including ones serde reads as `u64`, `i64` or `f64`, and
/// text that overflows `f64` (`1e400`) — written out by hand so every form is reached.
fn json_number_text() -> impl Strategy<Value = String> {
  prop_oneof![
    any::<u64>().prop_map(|n| n.to_string()),
    any::<i64>().prop_map(|n| n.to_string()),
    number()
      .prop_filter("finite", |n| n.is_finite())
      .prop_map(|n| format!("{n:e}")),
    select(vec![
      "0", "-0", "1e400", "-1e400", "1e-400", "0.0", "100", "1.5e3", "4.9e-324", "NaN", "Infinity",
      "-", "01", "1.", ".5",
    ])
    .prop_map(String::from),
  ]
}

/// Any JSON value, nested a few levels, with the keys of a plan dimension weighted up.
fn json_value() -> impl Strategy<Value = Value> {
  let leaf = prop_oneof![
    Just(Value::Null),
    any::<bool>().prop_map(Value::Bool),
    number().prop_map(|n| Number::from_f64(n).map_or(Value::Null, Value::Number)),
    any::<i64>().prop_map(|n| Value::Number(n.into())),
    any::<u64>().prop_map(|n| Value::Number(n.into())),
    text().prop_map(Value::String),
    select(vec![
      "percent", "requests", "tokens", "usd", "5h", "hourly", "daily", "weekly", "monthly",
    ])
    .prop_map(|s| Value::String(s.into())),
  ];
  leaf.prop_recursive(4, 64, 6, |inner| {
    prop_oneof![
      prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
      prop::collection::vec(
        (
          prop_oneof![
            select(vec!["unit", "window", "limit"]).prop_map(String::from),
            text()
          ],
          inner
        ),
        0..6
      )
      .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
    ]
  })
}

/// A dimension object that is *almost* valid: each of unit, window and limit is a valid
/// value, a wrong one, a value of the wrong JSON type, or missing.
fn near_dimension() -> impl Strategy<Value = Value> {
  let unit = prop_oneof![
    3 => select(QuotaUnit::ALL.to_vec()).prop_map(|u| Some(Value::String(u.as_str().into()))),
    1 => json_value().prop_map(Some),
    1 => Just(None),
  ];
  let window = prop_oneof![
    3 => select(QuotaWindow::ALL.to_vec()).prop_map(|w| Some(Value::String(w.as_str().into()))),
    1 => json_value().prop_map(Some),
    1 => Just(None),
  ];
  let limit = prop_oneof![
    3 => number().prop_map(|n| Some(Number::from_f64(n).map_or(Value::Null, Value::Number))),
    1 => json_value().prop_map(Some),
    1 => Just(None),
  ];
  (
    unit,
    window,
    limit,
    prop::option::of((text(), json_value())),
  )
    .prop_map(|(u, w, l, extra)| {
      let mut object = Map::new();
      for (key, value) in [("unit", u), ("window", w), ("limit", l)] {
        if let Some(value) = value {
          object.insert(key.to_string(), value);
        }
      }
      if let Some((key, value)) = extra {
        object.insert(key, value);
      }
      Value::Object(object)
    })
}

/// Plan JSON text: arbitrary strings, any JSON value, arrays of near-valid dimensions
/// (serialized, or written by hand with extreme number literals), and truncations of them.
fn plan_json() -> impl Strategy<Value = String> {
  prop_oneof![
    2 => text(),
    2 => json_value().prop_map(|v| v.to_string()),
    4 => prop::collection::vec(near_dimension(), 0..6).prop_map(|dims| Value::Array(dims).to_string()),
    2 => (
      select(QuotaUnit::ALL.to_vec()),
      select(QuotaWindow::ALL.to_vec()),
      json_number_text(),
    )
      .prop_map(|(u, w, n)| format!(r#"[{{"unit":"{}","window":"{}","limit":{n}}}]"#, u.as_str(), w.as_str())),
    1 => (prop::collection::vec(near_dimension(), 1..4), any::<prop::sample::Index>()).prop_map(|(dims, cut)| {
      let full = Value::Array(dims).to_string();
      let mut at = cut.index(full.len() + 1);
      while !full.is_char_boundary(at) {
        at -= 1;
      }
      full[..at].to_string()
    }),
    // Deep nesting: serde_json's recursion limit must turn it into an error, not a
    // stack overflow.
    1 => (1usize..400).prop_map(|depth| format!("{}{}", "[".repeat(depth), "]".repeat(depth))),
  ]
}

fn check_dimensions(
  dims: &[omniroute_quota_engine::core::dimensions::QuotaDimension],
) -> Result<(), TestCaseError> {
  for d in dims {
    prop_assert!(
      d.limit.is_finite() && d.limit > 0.0,
      "limit {} kept",
      d.limit
    );
  }
  Ok(())
}

proptest! {
  #![proptest_config(config())]

  /// The decision is total: any dimensions, allocation, consumption and threshold give a
  /// decision whose kind matches its reason, never a panic.
  #[test]
  fn fuzz_decide_fair_share(
    dims in prop::collection::vec(dimension(), 0..5),
    allocation in allocation(),
    consumed in prop::collection::vec(number(), 0..6),
    threshold in number(),
  ) {
    let d = decide_fair_share(&FairShareInput {
      dimensions: &dims,
      allocation: &allocation,
      consumed_by_this_key: &consumed,
      saturation_threshold: threshold,
    });
    match d.kind {
      DecisionKind::Allow => {
        prop_assert_eq!(d.reason, DecisionReason::Ok);
        prop_assert!(d.retry_after_ms.is_none());
      }
      DecisionKind::Block => {
        prop_assert_ne!(d.reason, DecisionReason::Ok);
        prop_assert!(d.blocking_dimension.is_some_and(|i| i < dims.len()));
        prop_assert!(!d.penalized);
      }
    }
    if let Some(ms) = d.retry_after_ms {
      prop_assert!(ms >= 1, "retry_after_ms {}", ms);
    }
  }

  /// The retry-after closed form on its own, with any window length (≤ 0 included).
  #[test]
  fn fuzz_decay_retry_after(
    prev in number(),
    curr in number(),
    threshold in number(),
    now in instant(),
    window in prop_oneof![instant(), select(QuotaWindow::ALL.to_vec()).prop_map(|w| w.ms())],
  ) {
    if let Some(t) = decay_retry_after_ms(prev, curr, threshold, now, window) {
      prop_assert!(t >= 1 && t <= window, "t {} window {}", t, window);
    }
  }

  /// The sliding window at any instant: never a panic (`i64::MIN` included), the bucket
  /// contains the instant, the previous bucket's weight is within [0, 1].
  #[test]
  fn fuzz_sliding_window(
    now in instant(),
    window in prop_oneof![select(QuotaWindow::ALL.to_vec()).prop_map(|w| w.ms()), 1i64..i64::MAX],
    prev in number(),
    curr in number(),
  ) {
    let bucket = bucket_index(now, window);
    let elapsed = elapsed_in_bucket(now, window);
    prop_assert!((0..window).contains(&elapsed));
    prop_assert_eq!(bucket.checked_mul(window).and_then(|start| start.checked_add(elapsed)).unwrap_or(now), now);
    let value = effective(prev, curr, now, window);
    if prev.is_finite() && curr.is_finite() && prev >= 0.0 && curr >= 0.0 {
      prop_assert!(value >= curr && value <= prev + curr + f64::EPSILON * (prev + curr));
    }
  }

  /// Rate-limit headers: any names and values, in any number; each reading holds only
  /// finite numbers, a limit > 0 and a reset a `Date` can hold, and its saturation is
  /// within 0..1.
  #[test]
  fn fuzz_rate_limit_headers(
    headers in prop::collection::vec((header_name(), header_value()), 0..12),
    now in instant(),
    later in 0i64..600_000,
  ) {
    let readings = parse_rate_limit_headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())), now);
    for reading in [readings.requests, readings.tokens].into_iter().flatten() {
      prop_assert!(reading.limit.is_finite() && reading.limit > 0.0 && reading.remaining.is_finite());
      // A reset JavaScript's `Date` can hold (the edge turns it into an ISO string).
      prop_assert!(reading.reset_at_ms.is_none_or(|t| t.abs() <= MAX_DATE_MS));
      if let Some(saturation) = reading.saturation(now.saturating_add(later)) {
        prop_assert!((0.0..=1.0).contains(&saturation), "saturation {}", saturation);
      }
    }
  }

  /// Durations, instants and reset values on their own, with any clock.
  #[test]
  fn fuzz_duration_and_instants(
    value in prop_oneof![duration_text(), instant_text(), text()],
    now in instant(),
  ) {
    if let Some(ms) = parse_duration_ms(&value) {
      prop_assert!(!ms.is_nan() && ms >= 0.0, "duration {} → {}", value, ms);
    }
    let _ = parse_iso8601_ms(&value);
    if let Some(at) = parse_reset_ms(&value, now) {
      prop_assert!(at.abs() <= MAX_DATE_MS, "reset {} → {}", value, at);
    }
  }

  /// Stored plan JSON, whatever it holds: only valid limits, one dimension per unit and
  /// window.
  #[test]
  fn fuzz_plan_json(json in plan_json()) {
    let dimensions = parse_plan_dimensions_lenient(&json);
    check_dimensions(&dimensions)?;
    for (i, d) in dimensions.iter().enumerate() {
      prop_assert!(dimensions[..i].iter().all(|e| (e.unit, e.window) != (d.unit, d.window)));
    }
  }
}

// ---- the SQLite counters: finite whatever the amounts -------------------------------

mod finite_counters {
  use super::{config, number};
  use omniroute_quota_engine::core::dimensions::{DimensionKey, QuotaUnit, QuotaWindow};
  use omniroute_quota_engine::error::QuotaError;
  use omniroute_quota_engine::store::validate::COUNTER_MAX;
  use omniroute_quota_engine::store::{OpenOptions, SqliteDb};
  use proptest::prelude::*;
  use proptest::test_runner::Config;
  use std::cell::{Cell, RefCell};
  use std::time::Duration;

  thread_local! {
    static DB: RefCell<Option<(tempfile::TempDir, SqliteDb)>> = const { RefCell::new(None) };
    static CASE: Cell<u64> = const { Cell::new(0) };
  }

  /// One database for every case of the thread (opening one per case would dominate).
  fn with_db<T>(f: impl FnOnce(&SqliteDb) -> T) -> T {
    DB.with(|cell| {
      let mut slot = cell.borrow_mut();
      let (_, db) = slot.get_or_insert_with(|| {
        let dir = tempfile::tempdir().unwrap();
        let db =
          SqliteDb::open(&dir.path().join("storage.sqlite"), &OpenOptions::default()).unwrap();
        (dir, db)
      });
      f(db)
    })
  }

  /// Store cases are dearer than the pure ones: a tenth of them.
  fn store_config() -> Config {
    Config {
      cases: (config().cases / 10).max(50),
      ..config()
    }
  }

  /// One operation: which key (0..3), the amount, and the path it takes.
  fn op() -> impl Strategy<Value = (usize, f64, u8)> {
    (0usize..3, number(), 0u8..4)
  }

  proptest! {
    #![proptest_config(store_config())]

    /// Any amounts through every write path (`consume`, buffered and write-through
    /// records, `incrementBucket`): a bad one is a `RangeError` and writes nothing, a good
    /// one leaves every stored counter in `0..=COUNTER_MAX` and every read finite; the
    /// pool total stays the sum of its rows; `clear` and GC always succeed.
    #[test]
    fn fuzz_counters_stay_finite(ops in prop::collection::vec(op(), 1..12)) {
      let case = CASE.with(|c| { c.set(c.get() + 1); c.get() });
      let key = DimensionKey::new(format!("fz{case}").as_str(), QuotaUnit::Tokens, QuotaWindow::Hourly);
      let dk = key.to_string();
      let t = 1_000 * 3_600_000 + 7;
      with_db(|db| -> Result<(), TestCaseError> {
        for (who, amount, path) in &ops {
          let id = format!("k{who}");
          let valid = amount.is_finite() && *amount >= 0.0;
          let result = match path {
            0 => db.consume(&id, &key, *amount, t).map(|_| ()),
            1 => db.record_writes(&id, &[(key.clone(), *amount)], t, Duration::from_secs(60)).map(|_| ()),
            2 => db.record_writes(&id, &[(key.clone(), *amount)], t, Duration::ZERO).map(|_| ()),
            _ => db.increment_bucket(&id, &dk, 1_000, *amount, t),
          };
          match result {
            Ok(()) => prop_assert!(valid, "{} accepted on path {}", amount, path),
            Err(QuotaError::InvalidArg { .. }) => prop_assert!(!valid, "{} refused on path {}", amount, path),
            Err(other) => prop_assert!(false, "{:?}", other),
          }
          let total = db.pool_consumed_total(&key, t).unwrap();
          prop_assert!(total.is_finite() && total >= 0.0, "total {}", total);
          for k in 0..3 {
            let v = db.peek(&format!("k{k}"), &key, t).unwrap();
            prop_assert!(v.is_finite() && (0.0..=COUNTER_MAX).contains(&v), "counter {}", v);
          }
        }
        db.flush_pending(false).unwrap();
        let conn = db.connection();
        let (max, min, sum): (Option<f64>, Option<f64>, Option<f64>) = conn
          .query_row(
            "SELECT max(consumed), min(consumed), sum(consumed) FROM quota_consumption WHERE dimension_key = ?1",
            [&dk],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
          )
          .unwrap();
        if let (Some(max), Some(min)) = (max, min) {
          prop_assert!(max <= COUNTER_MAX && min >= 0.0, "rows {}..{}", min, max);
        }
        let (curr, _) = db.sum_pool_dimension(&dk, 1_000).unwrap();
        let sum = sum.unwrap_or(0.0);
        prop_assert!((curr - sum).abs() <= sum.abs() * 1e-9 + 1e-6, "total {} rows {}", curr, sum);
        db.clear("k0", &key).unwrap();
        db.gc_older_than(t + 1).unwrap();
        let left: i64 = conn
          .query_row("SELECT count(*) FROM quota_consumption_totals WHERE dimension_key = ?1", [&dk], |r| r.get(0))
          .unwrap();
        prop_assert_eq!(left, 0);
        Ok(())
      })?;
    }
  }
}

// ---- Redis key names and reservation tokens (issue 15 items 4 and 5) -------------------

mod names {
  use super::*;
  use omniroute_quota_engine::core::admission::{Reservation, ReservationToken};
  use omniroute_quota_engine::store::redis::keys::KeyLayout;

  /// Ids made of the characters that could make names collide: separators, escapes and
  /// the pieces of `:model:`.
  fn id() -> impl Strategy<Value = String> {
    prop_oneof![
      3 => prop::collection::vec(select(vec!["a", "b", ":", "%", "3A", "25", "model", ":model:", "}", "{"]), 1..6)
        .prop_map(|parts| parts.concat()),
      1 => "[a-z0-9-]{1,8}",
    ]
  }

  fn unit() -> impl Strategy<Value = QuotaUnit> {
    select(vec![QuotaUnit::Requests, QuotaUnit::Tokens, QuotaUnit::Usd])
  }

  fn window() -> impl Strategy<Value = QuotaWindow> {
    select(vec![
      QuotaWindow::Hourly,
      QuotaWindow::Daily,
      QuotaWindow::FiveHours,
    ])
  }

  type Counter = (String, String, QuotaUnit, QuotaWindow, i64);

  fn counter() -> impl Strategy<Value = Counter> {
    (id(), id(), unit(), window(), -2i64..3)
  }

  proptest! {
    #![proptest_config(config())]

    /// No two distinct (key, pool, unit, window, bucket) share a bucket name or a members
    /// set name, in either layout; ids without `:` or `%` keep the host's exact names.
    #[test]
    fn fuzz_redis_names_are_injective(a in counter(), b in counter()) {
      for layout in [KeyLayout::Standalone, KeyLayout::Cluster] {
        let name = |c: &Counter| layout.bucket_key(&c.0, &DimensionKey::new(c.1.as_str(), c.2, c.3), c.4);
        let members = |c: &Counter| layout.members_key(&DimensionKey::new(c.1.as_str(), c.2, c.3), c.4);
        prop_assert_eq!(name(&a) == name(&b), a == b, "{} / {}", name(&a), name(&b));
        prop_assert_eq!(members(&a) == members(&b), (&a.1, a.2, a.3, a.4) == (&b.1, b.2, b.3, b.4));
      }
      if !format!("{}{}", a.0, a.1).contains([':', '%']) {
        prop_assert_eq!(
          KeyLayout::Standalone.bucket_key(&a.0, &DimensionKey::new(a.1.as_str(), a.2, a.3), a.4),
          format!("omniroute:quota:{}:{}:{}:{}:{}", a.0, a.1, a.2, a.3, a.4)
        );
      }
    }

    /// Any text, or a real token with a byte changed, parses without a panic; what parses
    /// names a 32-hex-digit id. Any stored state reads back without a panic.
    #[test]
    fn fuzz_reservation_tokens(text in ".{0,80}", at in 0usize..64, byte in any::<u8>(), pool in id()) {
      let real = Reservation::new(
        "0123456789abcdef0123456789abcdef".into(),
        "k",
        vec![(DimensionKey::new(pool.as_str(), QuotaUnit::Tokens, QuotaWindow::Hourly), 1.0)],
        0,
      );
      let token = real.token();
      let parsed = ReservationToken::parse(&token, "reservation").unwrap();
      prop_assert_eq!(&parsed.id, &real.id);
      prop_assert_eq!(Reservation::from_state(&real.id, &real.state()).unwrap(), real.clone());
      let mut bytes = token.into_bytes();
      let at = at % bytes.len();
      bytes[at] = byte;
      for candidate in [text.clone(), String::from_utf8_lossy(&bytes).into_owned()] {
        match ReservationToken::parse(&candidate, "reservation") {
          Ok(t) => prop_assert!(t.id.len() == 32 && t.id.bytes().all(|b| b.is_ascii_hexdigit())),
          Err(e) => prop_assert_eq!(e.code(), "ERR_QUOTA_INVALID_ARG"),
        }
        let _ = Reservation::from_state("x", &candidate);
      }
    }
  }
}
