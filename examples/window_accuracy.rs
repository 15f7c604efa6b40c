//! How far the two-bucket sliding-window estimate (docs/contract.md §2) is from an exact sliding
//! log, on synthetic traffic: prints a markdown table of the error distribution
//! (`estimate − exact`), as a percentage of the scenario's peak window count (the limit a
//! pool sized for that traffic would have) and of the exact count at that instant.
//!
//! ```sh
//! cargo run --release --example window_accuracy
//! ```
//!
//! Samples: every request (as the next call sees it) and a grid of 20 000 instants per
//! scenario, after a first window of warm-up. The properties behind the figures are
//! asserted in `tests/window_accuracy.rs`.

#[path = "../tests/window_support/mod.rs"]
mod window_support;

use window_support::*;

fn main() {
  println!("| traffic | samples | peak window | error, % of peak: min / p50 / p99 / max / mean abs | error, % of exact: min / p50 / p99 / max / mean abs |");
  println!("|---|---:|---:|---|---|");
  for (traffic, from, to) in scenarios() {
    let samples = traffic.samples(from, to, 20_000);
    let peak = samples.iter().map(|s| s.exact).fold(0.0, f64::max);
    let of_peak: Vec<f64> = samples.iter().map(|s| 100.0 * s.error() / peak).collect();
    let of_exact: Vec<f64> = samples
      .iter()
      .filter(|s| s.exact > 0.0)
      .map(|s| 100.0 * s.error() / s.exact)
      .collect();
    println!(
      "| {} | {} | {} | {} | {} |",
      traffic.name,
      samples.len(),
      peak,
      row(stats(&of_peak)),
      row(stats(&of_exact)),
    );
  }
}

fn row(stats: Option<Stats>) -> String {
  match stats {
    None => "—".to_string(),
    Some(s) => format!(
      "{:+.2} / {:+.2} / {:+.2} / {:+.2} / {:.2}",
      s.min, s.p50, s.p99, s.max, s.mean_abs
    ),
  }
}
