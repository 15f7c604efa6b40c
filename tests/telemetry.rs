//! The log queue (which thread takes which record), the faults' one warning and recovery,
//! and the metrics' text.

use omniroute_quota_engine::core::enforce::BlockReason;
use omniroute_quota_engine::engine::telemetry::*;

#[test]
fn field_values_as_json_keep_text_and_numbers_and_null_a_non_finite_one() {
  let json = |v: LogValue| v.into_json().to_string();
  assert_eq!(json(LogValue::Text("a\"b".into())), r#""a\"b""#);
  assert_eq!(json(LogValue::Number(1.5)), "1.5");
  assert_eq!(json(LogValue::Number(f64::NAN)), "null");
  assert_eq!(json(LogValue::Number(f64::INFINITY)), "null");
}

#[test]
fn records_wait_until_taken() {
  let queue = LogQueue::default();
  assert!(queue.take().is_none());
  queue.warn("quota:store", "a", None);
  queue.push(
    "info",
    "quota:enforce",
    "b",
    vec![("error", LogValue::Text("d".into()))],
  );
  assert!(queue.pending());
  let taken = queue.take().unwrap();
  assert_eq!(taken.len(), 2);
  assert_eq!(taken[1].text("error"), Some("d"));
  assert_eq!(taken[0].fields, []);
  assert!(!queue.pending() && queue.take().is_none());
}

#[test]
fn a_flood_is_bounded() {
  let queue = LogQueue::default();
  for i in 0..(CAPACITY + 10) {
    queue.warn("quota:store", format!("{i}"), None);
  }
  assert_eq!(queue.take().unwrap().len(), CAPACITY);
}

#[test]
fn one_warning_per_fault_then_a_recovery() {
  let logs = LogQueue::default();
  let faults = Faults::default();
  faults.succeeded(&logs, Operation::Record);
  assert!(logs.take().is_none());
  let fail = || {
    faults.failed(
      &logs,
      Operation::Record,
      "recording failed",
      "locked",
      vec![],
    )
  };
  for _ in 0..3 {
    fail();
  }
  let warned = logs.take().unwrap();
  assert_eq!(warned.len(), 1);
  assert_eq!(warned[0].level, "warn");
  assert_eq!(warned[0].text("error"), Some("locked"));
  faults.succeeded(&logs, Operation::Record);
  let recovered = logs.take().unwrap();
  assert_eq!(
    recovered[0].fields[0],
    ("failedCalls", LogValue::Number(3.0))
  );
  fail();
  assert_eq!(logs.take().unwrap().len(), 1, "re-armed");
}

#[test]
fn decisions_land_in_their_reason_and_latency_bucket() {
  let metrics = Metrics::default();
  metrics.decision(Counted::Allow(AllowReason::Ok), 0.000003);
  metrics.decision(Counted::Block(BlockReason::ModelCap), 0.2);
  metrics.decision(Counted::Allow(AllowReason::FailOpen), 5.0);
  metrics.store_error(Operation::Record);
  metrics.saturation_lookup(false);
  let text = metrics.render();
  assert!(text.contains("quota_engine_decisions_total{kind=\"allow\",reason=\"ok\"} 1\n"));
  assert!(text.contains("quota_engine_decisions_total{kind=\"block\",reason=\"model-cap\"} 1\n"));
  assert!(text.contains("quota_engine_decisions_total{kind=\"block\",reason=\"fair-share\"} 0\n"));
  assert!(text.contains("quota_engine_enforce_duration_seconds_bucket{le=\"0.00001\"} 1\n"));
  assert!(text.contains("quota_engine_enforce_duration_seconds_bucket{le=\"0.25\"} 2\n"));
  assert!(text.contains("quota_engine_enforce_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
  assert!(text.contains("quota_engine_enforce_duration_seconds_count 3\n"));
  assert!(text.contains("quota_engine_fail_open_total 1\n"));
  assert!(text.contains("quota_engine_store_errors_total{operation=\"record\"} 1\n"));
  assert!(text.contains("quota_engine_saturation_cache_misses_total 1\n"));
}

#[test]
fn a_record_goes_to_the_thread_that_made_it_when_that_thread_installed_the_host() {
  let queue = std::sync::Arc::new(LogQueue::default());
  let msgs =
    |taken: Option<Vec<LogRecord>>| taken.map(|t| t.into_iter().map(|r| r.msg).collect::<Vec<_>>());
  // A thread that logs `msg` and takes; one that installs the host leaves at its end (its
  // environment's teardown).
  let on_thread = |host: bool, msg: &'static str| {
    let queue = queue.clone();
    std::thread::spawn(move || {
      let me = std::thread::current().id();
      queue.host_thread(me, host);
      queue.warn("quota:store", msg, None);
      let taken = queue.take();
      queue.host_thread(me, false);
      taken
    })
    .join()
    .unwrap()
  };
  let here = std::thread::current().id();
  assert_eq!(
    msgs(on_thread(false, "no host yet")).unwrap(),
    ["no host yet"]
  );
  queue.host_thread(here, true);
  assert_eq!(msgs(on_thread(false, "hostless")), None);
  assert!(queue.pending());
  assert_eq!(msgs(on_thread(true, "own")).unwrap(), ["own"]);
  queue.warn("quota:store", "first host", None);
  assert_eq!(msgs(queue.take()).unwrap(), ["hostless", "first host"]);
  assert!(!queue.pending());
  queue.host_thread(here, false);
  assert_eq!(
    msgs(on_thread(false, "no host left")).unwrap(),
    ["no host left"]
  );
}
