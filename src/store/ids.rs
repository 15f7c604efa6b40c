//! Random identifiers: UUID v4 strings for new pools, like `crypto.randomUUID()`, and
//! reservation ids.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// A random UUID v4 string (`xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`, lower-case hex).
pub fn new_uuid_v4() -> String {
  let mut bytes = random_bytes();
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  let mut id = hex(&bytes);
  // From the end, so each index is still the hex digit's.
  for at in [20, 16, 12, 8] {
    id.insert(at, '-');
  }
  id
}

/// A reservation id: 128 random bits as 32 lower-case hex digits (docs/admission.md).
pub fn new_reservation_id() -> String {
  hex(&random_bytes())
}

fn hex(bytes: &[u8]) -> String {
  bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_bytes() -> [u8; 16] {
  let mut bytes = [0u8; 16];
  if getrandom::fill(&mut bytes).is_err() {
    fallback_bytes(&mut bytes);
  }
  bytes
}

/// When the OS refuses randomness: SipHash with the process's random keys over a counter
/// and the clock. Unique within the process, unpredictable enough for an id.
fn fallback_bytes(bytes: &mut [u8; 16]) {
  static COUNTER: AtomicU64 = AtomicU64::new(0);
  let state = RandomState::new();
  let nanos = std::time::SystemTime::now()
    .duration_since(std::time::UNIX_EPOCH)
    .map(|d| d.as_nanos())
    .unwrap_or(0);
  for half in 0..2 {
    let mut hasher = state.build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(nanos);
    hasher.write_u8(half as u8);
    bytes[half * 8..half * 8 + 8].copy_from_slice(&hasher.finish().to_le_bytes());
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn uuid_v4_shape() {
    let id = new_uuid_v4();
    assert_eq!(id.len(), 36);
    let parts: Vec<&str> = id.split('-').collect();
    assert_eq!(
      parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
      [8, 4, 4, 4, 12]
    );
    assert!(parts[2].starts_with('4'));
    assert!(matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
    assert!(id
      .chars()
      .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert_ne!(new_uuid_v4(), id);
  }

  #[test]
  fn reservation_ids_are_32_hex_digits_and_differ() {
    let id = new_reservation_id();
    assert_eq!(id.len(), 32);
    assert!(id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    assert_ne!(new_reservation_id(), id);
  }

  #[test]
  fn fallback_differs_between_calls() {
    let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
    fallback_bytes(&mut a);
    fallback_bytes(&mut b);
    assert_ne!(a, b);
  }
}
