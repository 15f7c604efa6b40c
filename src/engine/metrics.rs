//! The counters behind `metrics()` (beyond the contract): decisions by kind and reason,
//! the enforce latency histogram, store errors, fail-opens and saturation cache lookups,
//! rendered in the Prometheus text exposition format, version 0.0.4. The hot path adds to
//! plain numbers; the text is built only when scraped.

use crate::core::enforce::BlockReason;
use std::fmt::Write;
use std::sync::Mutex;

/// Upper bounds (seconds) of the enforce latency histogram: 10 µs … 1 s. A decision that
/// needs no saturation fetch takes microseconds; one that awaits a host fetcher takes as
/// long as the fetcher.
pub const LATENCY_BOUNDS: [f64; 16] = [
  0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
  0.1, 0.25, 0.5, 1.0,
];

/// Why a request was allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowReason {
  /// Every dimension passed.
  Ok,
  /// Allowed, with the soft policy's penalty.
  Deprioritized,
  /// No pool, plan or limit applies to the request.
  NotEnforced,
  /// A saturation fetch was still missing after waiting once.
  SaturationPending,
  /// The engine failed internally and allowed the request.
  FailOpen,
}

impl AllowReason {
  /// Every reason, in exposition order.
  pub const ALL: [AllowReason; 5] = [
    AllowReason::Ok,
    AllowReason::Deprioritized,
    AllowReason::NotEnforced,
    AllowReason::SaturationPending,
    AllowReason::FailOpen,
  ];

  /// The label value.
  pub fn as_str(self) -> &'static str {
    match self {
      AllowReason::Ok => "ok",
      AllowReason::Deprioritized => "deprioritized",
      AllowReason::NotEnforced => "not-enforced",
      AllowReason::SaturationPending => "saturation-pending",
      AllowReason::FailOpen => "fail-open",
    }
  }
}

const BLOCK_REASONS: [BlockReason; 4] = [
  BlockReason::FairShare,
  BlockReason::CapAbsolute,
  BlockReason::GlobalSaturated,
  BlockReason::ModelCap,
];

/// A decision, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
  Allow(AllowReason),
  Block(BlockReason),
}

/// Which hot-path operation a store error belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOperation {
  Enforce,
  Record,
}

#[derive(Default, Clone, Copy)]
struct State {
  allow: [u64; 5],
  block: [u64; 4],
  latency_counts: [u64; LATENCY_BOUNDS.len() + 1],
  latency_sum: f64,
  store_errors: [u64; 2],
  fail_open: u64,
  saturation_hits: u64,
  saturation_misses: u64,
}

/// The process's counters.
#[derive(Default)]
pub struct Metrics {
  state: Mutex<State>,
}

impl Metrics {
  fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
    f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
  }

  /// One `enforceQuotaShare` outcome that took `seconds`.
  pub fn decision(&self, decision: Counted, seconds: f64) {
    self.with(|s| {
      match decision {
        Counted::Allow(reason) => {
          s.allow[AllowReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0)] += 1
        }
        Counted::Block(reason) => {
          s.block[BLOCK_REASONS.iter().position(|r| *r == reason).unwrap_or(0)] += 1
        }
      }
      let bucket = LATENCY_BOUNDS
        .iter()
        .position(|bound| seconds <= *bound)
        .unwrap_or(LATENCY_BOUNDS.len());
      s.latency_counts[bucket] += 1;
      s.latency_sum += seconds;
      if decision == Counted::Allow(AllowReason::FailOpen) {
        s.fail_open += 1;
      }
    });
  }

  /// An error the store reported to a hot-path operation.
  pub fn store_error(&self, operation: StoreOperation) {
    self.with(|s| s.store_errors[operation as usize] += 1);
  }

  /// A `getSaturation` lookup answered from the cache (`true`) or fetched.
  pub fn saturation_lookup(&self, hit: bool) {
    self.with(|s| {
      if hit {
        s.saturation_hits += 1;
      } else {
        s.saturation_misses += 1;
      }
    });
  }

  /// The exposition text.
  pub fn render(&self) -> String {
    let s = self.with(|s| *s);
    let mut out = String::with_capacity(4096);
    family(
      &mut out,
      "quota_engine_decisions_total",
      "counter",
      "enforceQuotaShare decisions by kind and reason.",
    );
    for (reason, count) in AllowReason::ALL.iter().zip(s.allow) {
      let _ = writeln!(
        out,
        "quota_engine_decisions_total{{kind=\"allow\",reason=\"{}\"}} {count}",
        reason.as_str()
      );
    }
    for (reason, count) in BLOCK_REASONS.iter().zip(s.block) {
      let _ = writeln!(
        out,
        "quota_engine_decisions_total{{kind=\"block\",reason=\"{}\"}} {count}",
        reason.as_str()
      );
    }
    family(
      &mut out,
      "quota_engine_enforce_duration_seconds",
      "histogram",
      "Time from the enforceQuotaShare call to its decision, saturation fetches included.",
    );
    let mut cumulative = 0;
    for (i, count) in s.latency_counts.iter().enumerate() {
      cumulative += count;
      let le = LATENCY_BOUNDS
        .get(i)
        .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
      let _ = writeln!(
        out,
        "quota_engine_enforce_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}"
      );
    }
    let _ = writeln!(
      out,
      "quota_engine_enforce_duration_seconds_sum {}",
      s.latency_sum
    );
    let _ = writeln!(
      out,
      "quota_engine_enforce_duration_seconds_count {cumulative}"
    );
    family(
      &mut out,
      "quota_engine_store_errors_total",
      "counter",
      "Errors reported by the quota store, by hot-path operation.",
    );
    for (name, count) in ["enforce", "record"].iter().zip(s.store_errors) {
      let _ = writeln!(
        out,
        "quota_engine_store_errors_total{{operation=\"{name}\"}} {count}"
      );
    }
    family(
      &mut out,
      "quota_engine_fail_open_total",
      "counter",
      "Requests allowed because enforcement failed internally.",
    );
    let _ = writeln!(out, "quota_engine_fail_open_total {}", s.fail_open);
    family(
      &mut out,
      "quota_engine_saturation_cache_hits_total",
      "counter",
      "getSaturation lookups answered from the 30 s cache.",
    );
    let _ = writeln!(
      out,
      "quota_engine_saturation_cache_hits_total {}",
      s.saturation_hits
    );
    family(
      &mut out,
      "quota_engine_saturation_cache_misses_total",
      "counter",
      "getSaturation lookups that called a saturation fetcher (or the header fallback).",
    );
    let _ = writeln!(
      out,
      "quota_engine_saturation_cache_misses_total {}",
      s.saturation_misses
    );
    out
  }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
  let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn decisions_land_in_their_reason_and_latency_bucket() {
    let metrics = Metrics::default();
    metrics.decision(Counted::Allow(AllowReason::Ok), 0.000003);
    metrics.decision(Counted::Block(BlockReason::ModelCap), 0.2);
    metrics.decision(Counted::Allow(AllowReason::FailOpen), 5.0);
    metrics.store_error(StoreOperation::Record);
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
}
