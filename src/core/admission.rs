//! Atomic admission (`QUOTA_ADMISSION=reserve`, beyond the contract; docs/admission.md):
//! enforce reserves the request's estimated cost in the same atomic step that decides, and
//! record settles the difference with the actual cost later.
//!
//! - [`compile_checks`] turns an [`EnforcePlan`] into ordered `(counter, threshold, reason)`
//!   checks that a store evaluates where the counters live (a Lua script on Redis);
//!   [`evaluate`] is that evaluation, and agrees with [`EnforcePlan::decide`] on every input
//!   (a property test checks it).
//! - A [`Reservation`] (the API key and, per counter, the key, bucket and amount) is kept by
//!   the store under a random 128-bit id; the caller holds only a [`ReservationToken`]
//!   (`qr2.<id>.<pool>`), which cannot say what it holds. Settling or releasing takes the
//!   state away in the step that adjusts the counters, so a reservation takes effect at most
//!   once, on any process or replica.

use crate::core::dimensions::{
  bucket_index, elapsed_in_bucket, prev_weight, DimensionKey, Policy, QuotaUnit, QuotaWindow,
};
use crate::core::enforce::{
  BlockReason, Buckets, ConsumptionCost, EnforceOutcome, EnforcePlan, QuotaRequest,
};
use crate::error::{QuotaError, Result};

/// What a check compares with its threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CheckSide {
  /// The effective value of `reads()[i]` (this key's or the pool's buckets).
  Read(usize),
  /// A value fixed when the plan was made (a percent dimension's pool total, which is
  /// `globalUsedPercent × limit`) that already reaches its threshold: always blocks.
  Always,
}

/// One blocking rule: `effective(side) >= threshold` blocks with `reason`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionCheck {
  pub side: CheckSide,
  /// The window of the counter read (for the weight of its previous bucket).
  pub window_ms: i64,
  pub threshold: f64,
  pub reason: BlockReason,
}

impl AdmissionCheck {
  /// Whether the check blocks on `values` (parallel to the plan's reads) at `now_ms`.
  pub fn blocks(&self, values: &[Buckets], now_ms: i64) -> bool {
    match self.side {
      CheckSide::Always => true,
      CheckSide::Read(i) => {
        let b = values.get(i).copied().unwrap_or_default();
        b.effective(now_ms, self.window_ms) >= self.threshold
      }
    }
  }

  /// The weight of the previous bucket at `now_ms`: `effective = prev × w + curr`, the
  /// same product and sum the sliding-window formula computes.
  pub fn prev_weight(&self, now_ms: i64) -> f64 {
    prev_weight(elapsed_in_bucket(now_ms, self.window_ms), self.window_ms)
  }
}

/// A plan compiled to checks: the blocking rules in §3 order, and the soft-policy
/// penalty rules (`effective >= fair share` marks the allow `deprioritize`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledAdmission {
  pub checks: Vec<AdmissionCheck>,
  pub penalties: Vec<AdmissionCheck>,
  /// Whether an allow carries `deprioritize` (some limited dimension was decided on).
  pub ruled: bool,
}

/// What [`evaluate`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
  /// Every check passes; `deprioritize` as the default decision would say it.
  Allow { deprioritize: Option<bool> },
  /// Check `index` blocked first.
  Block { index: usize, reason: BlockReason },
}

/// Compiles `plan` to checks, or `None` while its saturation is not known (the plan then
/// reads nothing but the model bucket, and the caller fetches saturation first).
pub fn compile_checks(plan: &EnforcePlan) -> Option<CompiledAdmission> {
  if !plan.missing.is_empty() && !plan.dimensions.is_empty() {
    return None;
  }
  let mut checks = Vec::new();
  let mut penalties = Vec::new();
  let mut next = 0;
  if let Some(cap) = plan.model_cap {
    checks.push(AdmissionCheck {
      side: CheckSide::Read(next),
      window_ms: QuotaWindow::Hourly.ms(),
      threshold: cap.value,
      reason: BlockReason::ModelCap,
    });
    next += 1;
  }
  let allocation = &plan.allocation;
  for dim in &plan.dimensions {
    let window_ms = dim.key.window.ms();
    let key_side = CheckSide::Read(next);
    next += 1;
    let pool_check = if dim.key.unit == QuotaUnit::Percent {
      // Rule 5 on a constant: blocks now or never (NaN never blocks).
      (dim.global_used_percent * dim.limit >= dim.limit).then_some(CheckSide::Always)
    } else {
      next += 1;
      Some(CheckSide::Read(next - 1))
    };
    let check = |side, threshold, reason| AdmissionCheck {
      side,
      window_ms,
      threshold,
      reason,
    };
    let fair_share = allocation.weight / 100.0 * dim.limit;
    // Rule 4: the absolute cap.
    if let (Some(cap), Some(unit)) = (allocation.cap_value, allocation.cap_unit) {
      if unit == dim.key.unit {
        checks.push(check(key_side, cap, BlockReason::CapAbsolute));
      }
    }
    // Rule 5: the pool ceiling.
    if let Some(side) = pool_check {
      checks.push(check(side, dim.limit, BlockReason::GlobalSaturated));
    }
    // Rules 6 and 7.
    let strict = dim.global_used_percent >= plan.saturation_threshold;
    match allocation.policy {
      Policy::Hard if strict => checks.push(check(key_side, fair_share, BlockReason::FairShare)),
      Policy::Hard => checks.push(check(key_side, dim.limit, BlockReason::GlobalSaturated)),
      Policy::Soft => penalties.push(check(key_side, fair_share, BlockReason::FairShare)),
      Policy::Burst => {}
    }
  }
  Some(CompiledAdmission {
    checks,
    penalties,
    ruled: !plan.dimensions.is_empty(),
  })
}

/// The compiled decision on `values` at `now_ms`: the first blocking check, else an allow.
pub fn evaluate(compiled: &CompiledAdmission, values: &[Buckets], now_ms: i64) -> Admission {
  if let Some(index) = compiled
    .checks
    .iter()
    .position(|c| c.blocks(values, now_ms))
  {
    let reason = compiled.checks[index].reason;
    return Admission::Block { index, reason };
  }
  let penalized = compiled.penalties.iter().any(|c| c.blocks(values, now_ms));
  Admission::Allow {
    deprioritize: compiled.ruled.then_some(penalized),
  }
}

/// The outcome of an atomic reserve check (`blocked`: the index of the check that
/// blocked, if any): the default decision on the values the check read, which agrees with
/// the compiled checks (tested against it); should they ever disagree, the check's
/// admission — what was written — wins.
pub fn reserved_outcome(
  plan: &EnforcePlan,
  compiled: &CompiledAdmission,
  request: &QuotaRequest<'_>,
  blocked: Option<usize>,
  values: &[Buckets],
) -> EnforceOutcome {
  let decided = plan.decide(request, values);
  match (blocked, decided) {
    (None, allow @ EnforceOutcome::Allow { .. }) => allow,
    (None, _) => EnforceOutcome::Allow {
      deprioritize: Some(false),
    },
    (Some(_), block @ EnforceOutcome::Block { .. }) => block,
    (Some(index), _) => {
      let reason = compiled
        .checks
        .get(index)
        .map_or(BlockReason::GlobalSaturated, |c| c.reason);
      let model = (reason == BlockReason::ModelCap)
        .then_some(request.model)
        .flatten();
      EnforceOutcome::Block {
        reason,
        message: reason.message(request.provider, model),
        retry_after_seconds: None,
      }
    }
  }
}

/// `(dimension key, bucket index, delta)`: an amount to add to one bucket of a key.
pub type BucketDelta = (DimensionKey, i64, f64);

/// One reserved counter: `amount` added to `key`'s bucket `bucket`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservedEntry {
  pub key: DimensionKey,
  pub bucket: i64,
  pub amount: f64,
}

/// A reservation: what enforce added, per counter, for one API key, under its id.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
  /// 32 lower-case hex digits (128 random bits).
  pub id: String,
  pub api_key_id: String,
  pub entries: Vec<ReservedEntry>,
}

/// What the caller holds: the id of a reservation the store keeps, and its pool (where
/// the state lives in a Redis Cluster). Checked against the state, never trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationToken {
  pub id: String,
  pub pool_id: String,
}

/// The version prefix of a reservation token.
const PREFIX: &str = "qr2.";
/// A reservation's state lives at most this long (or two of its longest window, if less).
pub const RESERVATION_MAX_TTL_MS: i64 = 24 * 3_600_000;
/// At most this many counters in one reservation (a plan has a handful).
const MAX_ENTRIES: usize = 64;
/// At most this long, encoded.
const MAX_LEN: usize = 16 * 1024;

/// `amount` when it is a finite number > 0, else 0 (what a reservation counts).
fn positive(amount: f64) -> f64 {
  Some(amount)
    .filter(|a| a.is_finite() && *a > 0.0)
    .unwrap_or(0.0)
}

/// The estimated cost enforce reserves: one request, `estimatedCost` USD,
/// `estimatedTokens` tokens (absent, negative or non-finite → 0), nothing for percent.
pub fn estimated_cost(usd: Option<f64>, tokens: Option<f64>) -> ConsumptionCost {
  ConsumptionCost {
    tokens: Some(positive(tokens.unwrap_or(0.0))),
    usd: Some(positive(usd.unwrap_or(0.0))),
    requests: Some(1.0),
  }
}

impl Reservation {
  /// The reservation `id` of `writes` (from [`crate::core::enforce::planned_writes`])
  /// made at `now_ms`; non-finite or negative amounts reserve 0.
  pub fn new(id: String, api_key_id: &str, writes: Vec<(DimensionKey, f64)>, now_ms: i64) -> Self {
    Reservation {
      id,
      api_key_id: api_key_id.to_string(),
      entries: writes
        .into_iter()
        .map(|(key, amount)| ReservedEntry {
          bucket: bucket_index(now_ms, key.window.ms()),
          amount: positive(amount),
          key,
        })
        .collect(),
    }
  }

  /// The counters to add now: every entry with an amount > 0.
  pub fn additions(&self) -> Vec<BucketDelta> {
    self
      .entries
      .iter()
      .filter(|e| e.amount > 0.0)
      .map(|e| (e.key.clone(), e.bucket, e.amount))
      .collect()
  }

  /// Settling with the actual cost: `actual − reserved` per entry, into the entry's own
  /// bucket (zero deltas left out). The caller floors every bucket at 0.
  pub fn settle_deltas(&self, actual: &ConsumptionCost) -> Vec<BucketDelta> {
    self
      .entries
      .iter()
      .map(|e| {
        let amount = positive(actual.amount(e.key.unit));
        (e.key.clone(), e.bucket, amount - e.amount)
      })
      .filter(|(_, _, delta)| *delta != 0.0)
      .collect()
  }

  /// Releasing (the request failed): `−reserved` per entry.
  pub fn release_deltas(&self) -> Vec<BucketDelta> {
    let additions = self.additions().into_iter();
    additions
      .map(|(key, bucket, amount)| (key, bucket, -amount))
      .collect()
  }

  /// The pool the reservation was made in (model-cap counters belong to it).
  pub fn pool_id(&self) -> &str {
    self.entries.first().map_or("", |e| {
      // A model cap's `<pool>:model:<model>` belongs to `<pool>`.
      let pool = e.key.pool_id.as_str();
      pool.find(":model:").map_or(pool, |at| &pool[..at])
    })
  }

  /// What the caller is given: `"qr2." + id + "." + base64url(pool id)`.
  pub fn token(&self) -> String {
    format!(
      "{PREFIX}{}.{}",
      self.id,
      base64url::encode(self.pool_id().as_bytes())
    )
  }

  /// When the store may forget it: two of its longest window, at most a day.
  pub fn expires_at(&self, now_ms: i64) -> i64 {
    let longest = self
      .entries
      .iter()
      .map(|e| e.key.window.ms())
      .max()
      .unwrap_or(0);
    now_ms.saturating_add(longest.saturating_mul(2).min(RESERVATION_MAX_TTL_MS))
  }

  /// The state a store keeps (Redis): `JSON { k: apiKeyId, e: [[dimensionKey, bucket,
  /// amount], …] }`.
  pub fn state(&self) -> String {
    let entries: Vec<serde_json::Value> = self
      .entries
      .iter()
      .map(|e| serde_json::json!([e.key.to_string(), e.bucket, e.amount]))
      .collect();
    serde_json::json!({ "k": self.api_key_id, "e": entries }).to_string()
  }

  /// A store's state of reservation `id` back; an error says what is wrong with it. After
  /// a newline, the store may list additions it did not make (indices among
  /// [`additions`](Self::additions), comma-separated): those entries reserved nothing.
  pub fn from_state(id: &str, text: &str) -> Result<Self> {
    let bad = |why: &str| QuotaError::Store(format!("stored reservation {id} is corrupt: {why}"));
    let (text, unreserved) = text.split_once('\n').unwrap_or((text, ""));
    let json: serde_json::Value = serde_json::from_str(text).map_err(|_| bad("not JSON"))?;
    let api_key_id = json
      .get("k")
      .and_then(|v| v.as_str())
      .filter(|k| !k.is_empty())
      .ok_or_else(|| bad("no API key id"))?;
    let list = json
      .get("e")
      .and_then(|v| v.as_array())
      .filter(|e| !e.is_empty() && e.len() <= MAX_ENTRIES)
      .ok_or_else(|| bad("no counters"))?;
    let entry = |item: &serde_json::Value| {
      let triple = item
        .as_array()
        .filter(|t| t.len() == 3)
        .ok_or_else(|| bad("a counter is not [key, bucket, amount]"))?;
      Ok(ReservedEntry {
        key: triple[0]
          .as_str()
          .and_then(parse_dimension_key)
          .ok_or_else(|| bad("a dimension key has no pool, unit and window"))?,
        bucket: triple[1]
          .as_i64()
          .ok_or_else(|| bad("a bucket is not an integer"))?,
        amount: triple[2]
          .as_f64()
          .filter(|a| a.is_finite() && *a >= 0.0)
          .ok_or_else(|| bad("an amount is not a finite number >= 0"))?,
      })
    };
    let mut entries: Vec<ReservedEntry> = list.iter().map(entry).collect::<Result<_>>()?;
    let added: Vec<usize> = (0..entries.len())
      .filter(|&i| entries[i].amount > 0.0)
      .collect();
    for index in unreserved.split(',').filter(|i| !i.is_empty()) {
      let at = index.parse::<usize>().ok().and_then(|i| added.get(i));
      entries[*at.ok_or_else(|| bad("an unreserved index is not one of its additions"))?].amount =
        0.0;
    }
    Ok(Reservation {
      id: id.to_string(),
      api_key_id: api_key_id.to_string(),
      entries,
    })
  }
}

/// `"<pool>:<unit>:<window>"` (a counting unit) back into a key.
pub fn parse_dimension_key(text: &str) -> Option<DimensionKey> {
  let mut parts = text.rsplitn(3, ':');
  let (window, unit, pool) = (parts.next()?, parts.next()?, parts.next()?);
  let (unit, window) = (QuotaUnit::parse(unit)?, QuotaWindow::parse(window)?);
  (!pool.is_empty() && unit != QuotaUnit::Percent).then(|| DimensionKey::new(pool, unit, window))
}

impl ReservationToken {
  /// Reads what a caller gave back: a `RangeError` naming `field` when it is not a
  /// reservation token at all (an old `qr1.` one included: those were forgeable). A
  /// well-formed token names state the store may not have; that is decided there.
  pub fn parse(text: &str, field: &str) -> Result<Self> {
    let bad = |why: &str| QuotaError::range_error(field, format!("not a valid reservation: {why}"));
    if text.len() > MAX_LEN {
      return Err(bad("too long"));
    }
    let body = text
      .strip_prefix(PREFIX)
      .ok_or_else(|| bad("unknown format"))?;
    let (id, pool) = body.split_once('.').ok_or_else(|| bad("no pool"))?;
    if id.len() != 32 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
      return Err(bad("the id is not 32 lower-case hex digits"));
    }
    let pool_id = base64url::decode(pool)
      .and_then(|bytes| String::from_utf8(bytes).ok())
      .ok_or_else(|| bad("the pool is not base64url UTF-8"))?;
    Ok(ReservationToken {
      id: id.to_string(),
      pool_id,
    })
  }
}

/// RFC 4648 §5 base64url without padding.
mod base64url {
  const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

  pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
      let n = chunk
        .iter()
        .enumerate()
        .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
      for i in 0..=chunk.len() {
        out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
      }
    }
    out
  }

  pub fn decode(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u32> = text
      .bytes()
      .map(|c| ALPHABET.iter().position(|a| *a == c).map(|p| p as u32))
      .collect::<Option<_>>()?;
    if digits.len() % 4 == 1 {
      return None;
    }
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
      let n = chunk
        .iter()
        .enumerate()
        .fold(0u32, |n, (i, d)| n | (d << (18 - 6 * i)));
      for i in 0..chunk.len() - 1 {
        out.push((n >> (16 - 8 * i)) as u8);
      }
    }
    Some(out)
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  fn key(unit: QuotaUnit) -> DimensionKey {
    DimensionKey::new("p", unit, QuotaWindow::Hourly)
  }

  /// Round trips are __test__/admission.test.mjs's: every settle and release decodes the
  /// pool of a token, and "cannot be forged or moved" names a pool encoded by `Buffer`.
  #[test]
  fn base64url_is_the_url_alphabet_without_padding() {
    assert_eq!(base64url::encode(b"\xfb\xff"), "-_8");
    assert!(base64url::decode("a").is_none());
    assert!(base64url::decode("ab=c").is_none());
  }

  /// That a token and its state read back is `fuzz_reservation_tokens`' (tests/fuzz.rs).
  #[test]
  fn a_reservation_settles_per_entry_in_its_own_pool() {
    let writes = vec![
      (key(QuotaUnit::Requests), 1.0),
      (key(QuotaUnit::Tokens), 100.0),
      (
        DimensionKey::new("p:model:m", QuotaUnit::Usd, QuotaWindow::Hourly),
        0.0,
      ),
    ];
    let r = Reservation::new(String::new(), "k", writes, 10 * 3_600_000 + 5);
    assert_eq!(r.pool_id(), "p");
    assert_eq!(r.expires_at(0), 2 * 3_600_000);
    assert_eq!(r.entries[0].bucket, 10);
    let actual = ConsumptionCost {
      tokens: Some(40.0),
      usd: Some(0.5),
      requests: None,
    };
    let deltas: Vec<(String, i64, f64)> = r
      .settle_deltas(&actual)
      .into_iter()
      .map(|(k, b, d)| (k.to_string(), b, d))
      .collect();
    assert_eq!(
      deltas,
      vec![
        ("p:tokens:hourly".to_string(), 10, -60.0),
        ("p:model:m:usd:hourly".to_string(), 10, 0.5),
      ]
    );
    assert_eq!(r.release_deltas().len(), 2);
    assert_eq!(r.additions().len(), 2);
  }

  /// Malformed tokens are __test__/admission.test.mjs's "a malformed reservation is
  /// rejected and writes nothing"; corrupt state is only ever read from Redis.
  #[test]
  fn corrupt_state_is_an_error() {
    for state in [
      r#"{"k":"","e":[["p:requests:hourly",1,1]]}"#,
      r#"{"k":"k","e":[]}"#,
      r#"{"k":"k","e":[["p:requests:never",1,1]]}"#,
      r#"{"k":"k","e":[["p:percent:hourly",1,1]]}"#,
      r#"{"k":"k","e":[["p:requests:hourly",1.5,1]]}"#,
      r#"{"k":"k","e":[["p:requests:hourly",1,-1]]}"#,
      r#"{"k":"k","e":[["p:requests:hourly",1]]}"#,
    ] {
      assert!(Reservation::from_state("id", state).is_err(), "{state}");
    }
  }

  /// A positive estimate is reserved as given: __test__/admission.test.mjs's "settling
  /// with a smaller and a larger actual cost gives exactly the actual totals".
  #[test]
  fn a_bad_estimate_reserves_only_the_request() {
    let cost = estimated_cost(Some(f64::NAN), Some(-3.0));
    let amounts = QuotaUnit::ALL.map(|unit| cost.amount(unit));
    assert_eq!(amounts, [0.0, 1.0, 0.0, 0.0]); // percent, requests, tokens, usd
  }

  mod agreement {
    use super::super::*;
    use crate::core::dimensions::QuotaPool;
    use crate::core::enforce::{ModelCapLimit, PlannedDimension};
    use crate::core::fair_share::AllocationInput;
    use proptest::prelude::*;
    use proptest::sample::select;
    use std::sync::Arc;

    const NOW: i64 = 1_000 * 3_600_000 + 1_234_567;

    fn unit() -> impl Strategy<Value = QuotaUnit> {
      select(QuotaUnit::ALL.to_vec())
    }

    /// Small integers often land exactly on a threshold (the `>=` edges).
    fn amount() -> impl Strategy<Value = f64> {
      prop_oneof![
        (0u32..20).prop_map(f64::from),
        0.0f64..2_000.0,
        Just(f64::NAN),
      ]
    }

    fn buckets() -> impl Strategy<Value = Buckets> {
      (amount(), amount()).prop_map(|(curr, prev)| Buckets { curr, prev })
    }

    fn plan(
      dims: Vec<(QuotaUnit, QuotaWindow, f64, f64)>,
      weight: f64,
      cap: Option<(f64, QuotaUnit)>,
      policy: Policy,
      model_cap: Option<f64>,
      threshold: f64,
    ) -> EnforcePlan {
      EnforcePlan {
        // The decision reads the allocation below, not the pool.
        pool: Arc::new(QuotaPool::default()),
        allocation: AllocationInput {
          weight,
          cap_value: cap.map(|c| c.0),
          cap_unit: cap.map(|c| c.1),
          policy,
        },
        model_cap: model_cap.map(|value| ModelCapLimit {
          value,
          unit: QuotaUnit::Requests,
        }),
        dimensions: dims
          .into_iter()
          .map(|(unit, window, limit, gup)| PlannedDimension {
            key: DimensionKey::new("p", unit, window),
            limit,
            global_used_percent: gup,
          })
          .collect(),
        missing: Vec::new(),
        reads: Vec::new(),
        saturation_threshold: threshold,
        now_ms: NOW,
      }
    }

    proptest! {
      #![proptest_config(ProptestConfig::with_cases(4000))]

      /// For every rule of §3 (and the model cap of §7), the compiled checks decide what
      /// `decide` decides: the same block reason, or the same `deprioritize`.
      #[test]
      fn compiled_checks_agree_with_the_decision(
        dims in prop::collection::vec(
          (unit(), select(QuotaWindow::ALL.to_vec()), prop_oneof![(1u32..40).prop_map(f64::from), 0.5f64..3_000.0],
           prop_oneof![Just(0.0), Just(0.5), Just(1.0), 0.0f64..1.2]),
          0..4,
        ),
        weight in prop_oneof![Just(0.0), Just(50.0), Just(100.0), 0.0f64..100.0],
        cap in prop::option::of(((1u32..30).prop_map(f64::from), unit())),
        policy in select(Policy::ALL.to_vec()),
        model_cap in prop::option::of((1u32..20).prop_map(f64::from)),
        threshold in prop_oneof![Just(0.5), 0.0f64..1.0],
        values in prop::collection::vec(buckets(), 9),
      ) {
        let plan = plan(dims, weight, cap, policy, model_cap, threshold);
        let request = QuotaRequest { api_key_id: "a", connection_id: "c", provider: "x", model: Some("m") };
        let compiled = compile_checks(&plan).expect("saturation is known");
        let expected = plan.decide(&request, &values);
        match (evaluate(&compiled, &values, NOW), expected) {
          (Admission::Allow { deprioritize: a }, EnforceOutcome::Allow { deprioritize: b }) => {
            prop_assert_eq!(a, b)
          }
          (Admission::Block { reason: a, .. }, EnforceOutcome::Block { reason: b, .. }) => {
            prop_assert_eq!(a, b)
          }
          (got, want) => prop_assert!(false, "compiled {:?}, decided {:?}", got, want),
        }
      }
    }
  }
}
