//! A reservation's state as a store keeps it (docs/admission.md): the additions the store
//! could not make, listed after the JSON, reserved nothing.

use omniroute_quota_engine::core::admission::Reservation;
use omniroute_quota_engine::core::enforce::ConsumptionCost;

const STATE: &str =
  r#"{"k":"k","e":[["p:requests:hourly",7,1],["p:usd:daily",7,0],["p:tokens:hourly",7,100]]}"#;

#[test]
fn an_unreserved_addition_settles_the_whole_cost_and_releases_nothing() {
  // Addition 1 is the tokens entry (the usd one reserved 0, so it is no addition).
  let r = Reservation::from_state("id", &format!("{STATE}\n1")).unwrap();
  assert_eq!(r.additions().len(), 1, "only the requests entry was added");
  let released: Vec<f64> = r.release_deltas().iter().map(|d| d.2).collect();
  assert_eq!(released, [-1.0]);
  let actual = ConsumptionCost {
    tokens: Some(40.0),
    usd: None,
    requests: None,
  };
  let settled: Vec<(String, f64)> = (r.settle_deltas(&actual).iter())
    .map(|(key, _, delta)| (key.to_string(), *delta))
    .collect();
  assert_eq!(
    settled,
    [("p:tokens:hourly".to_string(), 40.0)],
    "requests: 1 − 1 = 0, left out"
  );
  // Without the list, the tokens entry reserved 100.
  let whole = Reservation::from_state("id", STATE).unwrap();
  assert_eq!(whole.additions().len(), 2);
}

#[test]
fn an_unreserved_index_that_is_no_addition_is_corrupt() {
  for suffix in ["2", "x", "-1", "0,9"] {
    let state = format!("{STATE}\n{suffix}");
    assert!(Reservation::from_state("id", &state).is_err(), "{suffix}");
  }
  assert!(
    Reservation::from_state("id", &format!("{STATE}\n")).is_ok(),
    "an empty list"
  );
}
