//! The two-bucket sliding-window counter of docs/contract.md §2.

/// The bucket `now` falls in: `floor(now / window_ms)`.
pub fn bucket_index(now_ms: i64, window_ms: i64) -> i64 {
  now_ms.div_euclid(window_ms)
}

/// `prev × (1 − elapsed / window) + curr`, with `elapsed = now − curr_bucket × window`.
pub fn effective(prev: f64, curr: f64, now_ms: i64, window_ms: i64) -> f64 {
  // `now − bucket × window`, without the product (it overflows near `i64::MIN`).
  prev * prev_weight(elapsed_in_bucket(now_ms, window_ms), window_ms) + curr
}

/// The share of `prev` still inside the window, `1 − elapsed / window`.
pub fn prev_weight(elapsed_ms: i64, window_ms: i64) -> f64 {
  1.0 - elapsed_ms as f64 / window_ms as f64
}

/// Milliseconds since the current bucket began.
pub fn elapsed_in_bucket(now_ms: i64, window_ms: i64) -> i64 {
  now_ms.rem_euclid(window_ms)
}

#[cfg(test)]
mod tests {
  use super::*;

  const H: i64 = 3_600_000;

  #[test]
  fn bucket_index_floors() {
    assert_eq!(bucket_index(0, H), 0);
    assert_eq!(bucket_index(H - 1, H), 0);
    assert_eq!(bucket_index(H, H), 1);
    assert_eq!(bucket_index(5 * H + 7, H), 5);
  }

  #[test]
  fn previous_bucket_decays_linearly() {
    // At the start of a bucket all of prev counts, halfway half of it, at the end none.
    assert_eq!(effective(100.0, 10.0, 7 * H, H), 110.0);
    assert_eq!(effective(100.0, 10.0, 7 * H + H / 2, H), 60.0);
    assert!((effective(100.0, 0.0, 8 * H - 1, H) - 100.0 / H as f64).abs() < 1e-9);
  }

  #[test]
  fn any_instant_is_safe() {
    // Found by tests/fuzz.rs: `bucket × window` overflowed below `i64::MIN`.
    let elapsed = elapsed_in_bucket(i64::MIN, H);
    assert!((0..H).contains(&elapsed));
    let expected = 10.0 * prev_weight(elapsed, H) + 1.0;
    assert_eq!(effective(10.0, 1.0, i64::MIN, H), expected);
    assert_eq!(
      effective(0.0, 0.0, -6_076_440_796_080_325_262, i64::MAX / 2 + 2),
      0.0
    );
  }
}
