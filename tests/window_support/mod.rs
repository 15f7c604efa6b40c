//! The two-bucket sliding-window estimate (docs/contract.md §2, `core::dimensions::effective`)
//! against an exact sliding log, on synthetic traffic. Shared by `tests/window_accuracy.rs`
//! (the properties) and `examples/window_accuracy.rs` (the table).
#![allow(dead_code)] // Each includer uses a different part.

use omniroute_quota_engine::core::dimensions::{bucket_index, effective, elapsed_in_bucket};

/// The hourly window, in ms.
pub const W: i64 = 3_600_000;

/// A deterministic generator (SplitMix64): the figures are the same on every run.
pub struct SplitMix(u64);

impl SplitMix {
  pub fn new(seed: u64) -> Self {
    SplitMix(seed)
  }

  pub fn next_u64(&mut self) -> u64 {
    self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = self.0;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
  }

  /// Uniform in [0, 1).
  pub fn unit(&mut self) -> f64 {
    (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
  }

  /// Uniform in [lo, hi).
  pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
    lo + (self.unit() * (hi - lo) as f64) as i64
  }

  /// An exponential gap of mean `mean`.
  pub fn exp(&mut self, mean: f64) -> f64 {
    -mean * (1.0 - self.unit()).ln()
  }
}

/// Request times (ms), each of cost 1, with the buckets a store would hold for them.
pub struct Traffic {
  pub name: &'static str,
  /// Sorted.
  pub times: Vec<i64>,
  pub window_ms: i64,
}

/// One query of both counters at `now`, counting every request at or before `now`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
  pub now: i64,
  /// Requests in `(now − W, now]`.
  pub exact: f64,
  /// `prev × (1 − elapsed / W) + curr`.
  pub estimate: f64,
  /// The previous bucket's count and the elapsed share of the current bucket.
  pub prev: f64,
  pub elapsed_share: f64,
}

impl Sample {
  pub fn error(&self) -> f64 {
    self.estimate - self.exact
  }
}

impl Traffic {
  pub fn new(name: &'static str, mut times: Vec<i64>, window_ms: i64) -> Self {
    times.sort_unstable();
    Traffic {
      name,
      times,
      window_ms,
    }
  }

  /// Both counters at `now`: the exact log by binary search, the estimate from the two
  /// buckets the store would hold (only requests at or before `now` counted).
  pub fn sample(&self, now: i64) -> Sample {
    let w = self.window_ms;
    let upto = self.times.partition_point(|&t| t <= now);
    let from = self.times.partition_point(|&t| t <= now - w);
    let exact = (upto - from) as f64;
    // The two buckets the store would hold: requests in [start(prev), start(curr)) and
    // [start(curr), now].
    let curr_start = bucket_index(now, w) * w;
    let prev_from = self.times.partition_point(|&t| t < curr_start - w);
    let curr_from = self.times.partition_point(|&t| t < curr_start);
    let prev = (curr_from - prev_from) as f64;
    let curr = (upto - curr_from) as f64;
    Sample {
      now,
      exact,
      estimate: effective(prev, curr, now, w),
      prev,
      elapsed_share: elapsed_in_bucket(now, w) as f64 / w as f64,
    }
  }

  /// Samples at every request (just after it is counted, as the next enforce sees it) and
  /// on a grid of `grid` points over `[from, to)`, which catches the instants between
  /// requests (a window edge passing a burst).
  pub fn samples(&self, from: i64, to: i64, grid: usize) -> Vec<Sample> {
    let mut out: Vec<Sample> = self
      .times
      .iter()
      .filter(|&&t| t >= from && t < to)
      .map(|&t| self.sample(t))
      .collect();
    for i in 0..grid {
      let now = from + ((to - from) as f64 * i as f64 / grid as f64) as i64;
      out.push(self.sample(now));
    }
    out
  }
}

/// `per_window` requests evenly spaced, for `windows` windows from 0.
pub fn steady_uniform(per_window: i64, windows: i64) -> Traffic {
  let gap = W / per_window;
  Traffic::new(
    "steady, uniform",
    (0..per_window * windows).map(|i| i * gap).collect(),
    W,
  )
}

/// A Poisson process of `per_window` requests per window on average.
pub fn steady_poisson(per_window: f64, windows: i64, seed: u64) -> Traffic {
  let mut rng = SplitMix::new(seed);
  let mean_gap = W as f64 / per_window;
  let mut t = 0.0;
  let mut times = Vec::new();
  loop {
    t += rng.exp(mean_gap);
    if t >= (windows * W) as f64 {
      break;
    }
    times.push(t as i64);
  }
  Traffic::new("steady, Poisson", times, W)
}

/// Bursts of `size` requests within one minute, starting at random times (on average
/// `bursts_per_window` per window), over a light Poisson background.
pub fn bursty(bursts_per_window: f64, size: i64, windows: i64, seed: u64) -> Traffic {
  let mut rng = SplitMix::new(seed);
  let mut times = steady_poisson(50.0, windows, seed ^ 0xB0B).times;
  let mut t = 0.0;
  loop {
    t += rng.exp(W as f64 / bursts_per_window);
    if t >= (windows * W) as f64 {
      break;
    }
    let start = t as i64;
    for _ in 0..size {
      times.push(start + rng.range(0, 60_000));
    }
  }
  Traffic::new("bursty", times, W)
}

/// The boundary case: 100 requests at 0.9 W, 100 at 1.1 W.
pub fn boundary() -> Traffic {
  let mut times = vec![W * 9 / 10; 100];
  times.extend(std::iter::repeat_n(W * 11 / 10, 100));
  Traffic::new("boundary (100 @ 0.9 W, 100 @ 1.1 W)", times, W)
}

/// Summary of a set of values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
  pub min: f64,
  pub p50: f64,
  pub p99: f64,
  pub max: f64,
  pub mean_abs: f64,
}

/// `min, p50, p99, max, mean |x|` (nearest-rank percentiles); `None` for no values.
pub fn stats(values: &[f64]) -> Option<Stats> {
  if values.is_empty() {
    return None;
  }
  let mut sorted = values.to_vec();
  sorted.sort_by(f64::total_cmp);
  let rank =
    |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
  Some(Stats {
    min: sorted[0],
    p50: rank(0.5),
    p99: rank(0.99),
    max: sorted[sorted.len() - 1],
    mean_abs: sorted.iter().map(|v| v.abs()).sum::<f64>() / sorted.len() as f64,
  })
}

/// The scenarios of the README table, with the span each is measured over (after a
/// first window of warm-up, so `prev` is populated).
pub fn scenarios() -> Vec<(Traffic, i64, i64)> {
  vec![
    (steady_uniform(1000, 6), W, 6 * W),
    (steady_poisson(1000.0, 6, 7), W, 6 * W),
    (bursty(3.0, 200, 24, 11), W, 24 * W),
    (boundary(), W * 11 / 10, 2 * W),
  ]
}
