//! The counters behind `metrics()` (beyond the contract): decisions by kind and reason,
//! the enforce latency histogram, store errors, fail-opens and saturation cache lookups,
//! rendered in the Prometheus text exposition format, version 0.0.4. The hot path adds to
//! plain numbers; the text is built only when scraped.

use crate::core::enforce::BlockReason;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The counters: plain atomics, so counting takes no lock (the hot path counts every call).
#[derive(Default)]
pub struct Metrics {
  allow: [AtomicU64; 5],
  block: [AtomicU64; 4],
  latency_counts: [AtomicU64; LATENCY_BOUNDS.len() + 1],
  /// The latencies' sum, in nanoseconds.
  latency_sum_ns: AtomicU64,
  store_errors: [AtomicU64; 2],
  fail_open: AtomicU64,
  saturation_hits: AtomicU64,
  saturation_misses: AtomicU64,
  view_hits: AtomicU64,
  view_misses: AtomicU64,
  view_disconnects: AtomicU64,
  /// Redis URLs whose tracking connection is subscribed.
  view_tracking: std::sync::atomic::AtomicI64,
}

fn add(counter: &AtomicU64) {
  counter.fetch_add(1, Ordering::Relaxed);
}

fn read(counter: &AtomicU64) -> u64 {
  counter.load(Ordering::Relaxed)
}

impl Metrics {
  /// One `enforceQuotaShare` outcome that took `seconds`.
  pub fn decision(&self, decision: Counted, seconds: f64) {
    match decision {
      Counted::Allow(reason) => {
        add(
          &self.allow[AllowReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0)],
        );
        if reason == AllowReason::FailOpen {
          add(&self.fail_open);
        }
      }
      Counted::Block(reason) => {
        add(&self.block[BLOCK_REASONS.iter().position(|r| *r == reason).unwrap_or(0)])
      }
    }
    let bucket = LATENCY_BOUNDS
      .iter()
      .position(|bound| seconds <= *bound)
      .unwrap_or(LATENCY_BOUNDS.len());
    add(&self.latency_counts[bucket]);
    let nanos = if seconds.is_finite() && seconds > 0.0 {
      (seconds * 1e9) as u64
    } else {
      0
    };
    self.latency_sum_ns.fetch_add(nanos, Ordering::Relaxed);
  }

  /// An error the store reported to a hot-path operation.
  pub fn store_error(&self, operation: StoreOperation) {
    add(&self.store_errors[operation as usize]);
  }

  /// A `getSaturation` lookup answered from the cache (`true`) or fetched.
  pub fn saturation_lookup(&self, hit: bool) {
    add(if hit {
      &self.saturation_hits
    } else {
      &self.saturation_misses
    });
  }

  /// A default-mode Redis enforce with the counter view on: decided from the view
  /// (`true`) or by the read script.
  pub fn redis_view(&self, hit: bool) {
    add(if hit {
      &self.view_hits
    } else {
      &self.view_misses
    });
  }

  /// A tracking connection subscribed (`true`) or lost.
  pub fn redis_view_tracking(&self, up: bool) {
    if up {
      self.view_tracking.fetch_add(1, Ordering::Relaxed);
    } else {
      self.view_tracking.fetch_sub(1, Ordering::Relaxed);
      add(&self.view_disconnects);
    }
  }

  /// The exposition text.
  pub fn render(&self) -> String {
    let mut out = String::with_capacity(4096);
    family(
      &mut out,
      "quota_engine_decisions_total",
      "counter",
      "enforceQuotaShare decisions by kind and reason.",
    );
    for (reason, count) in AllowReason::ALL.iter().zip(&self.allow) {
      let _ = writeln!(
        out,
        "quota_engine_decisions_total{{kind=\"allow\",reason=\"{}\"}} {}",
        reason.as_str(),
        read(count)
      );
    }
    for (reason, count) in BLOCK_REASONS.iter().zip(&self.block) {
      let _ = writeln!(
        out,
        "quota_engine_decisions_total{{kind=\"block\",reason=\"{}\"}} {}",
        reason.as_str(),
        read(count)
      );
    }
    family(
      &mut out,
      "quota_engine_enforce_duration_seconds",
      "histogram",
      "Time from the enforceQuotaShare call to its decision, saturation fetches included.",
    );
    let mut cumulative = 0;
    for (i, count) in self.latency_counts.iter().enumerate() {
      cumulative += read(count);
      let le = LATENCY_BOUNDS
        .get(i)
        .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
      let _ = writeln!(
        out,
        "quota_engine_enforce_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}"
      );
    }
    let sum = read(&self.latency_sum_ns) as f64 / 1e9;
    let _ = writeln!(out, "quota_engine_enforce_duration_seconds_sum {sum}");
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
    for (name, count) in ["enforce", "record"].iter().zip(&self.store_errors) {
      let _ = writeln!(
        out,
        "quota_engine_store_errors_total{{operation=\"{name}\"}} {}",
        read(count)
      );
    }
    family(
      &mut out,
      "quota_engine_fail_open_total",
      "counter",
      "Requests allowed because enforcement failed internally.",
    );
    let _ = writeln!(
      out,
      "quota_engine_fail_open_total {}",
      read(&self.fail_open)
    );
    family(
      &mut out,
      "quota_engine_saturation_cache_hits_total",
      "counter",
      "getSaturation lookups answered from the 30 s cache.",
    );
    let _ = writeln!(
      out,
      "quota_engine_saturation_cache_hits_total {}",
      read(&self.saturation_hits)
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
      read(&self.saturation_misses)
    );
    for (name, help, value) in [
      (
        "quota_engine_redis_view_hits_total",
        "Redis enforce decisions made from the counter view, with no round trip (docs/redis.md#the-counter-view).",
        read(&self.view_hits),
      ),
      (
        "quota_engine_redis_view_misses_total",
        "Redis enforce decisions, with the counter view on, that took the read script.",
        read(&self.view_misses),
      ),
      (
        "quota_engine_redis_view_disconnects_total",
        "Counter-view tracking connections lost (each drops its view).",
        read(&self.view_disconnects),
      ),
    ] {
      family(&mut out, name, "counter", help);
      let _ = writeln!(out, "{name} {value}");
    }
    family(
      &mut out,
      "quota_engine_redis_view_tracking",
      "gauge",
      "Redis URLs whose counter-view tracking connection is subscribed.",
    );
    let _ = writeln!(
      out,
      "quota_engine_redis_view_tracking {}",
      self.view_tracking.load(Ordering::Relaxed)
    );
    family(
      &mut out,
      "quota_engine_record_commits_total",
      "counter",
      "Transactions that committed buffered SQLite records (group commit by time: docs/sqlite.md).",
    );
    let _ = writeln!(
      out,
      "quota_engine_record_commits_total {}",
      crate::store::sqlite::record_commits()
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
