//! A small, fast, non-cryptographic hasher for the scheduler's maps (the multiply-rotate
//! of rustc's `FxHasher`).
//!
//! The scheduler's keys are interned ids (`u32`) on the hot path, and SipHash's
//! HashDoS resistance buys nothing there: the keys are the host's own connection ids,
//! execution keys and combo names, not attacker-chosen strings. At 512 targets a
//! selection does about a thousand lookups, so the hash function shows up in the profile.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// FxHash: `hash = (hash.rotate_left(5) ^ word) × SEED` per word.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher {
  hash: u64,
}

impl FxHasher {
  #[inline]
  fn add(&mut self, word: u64) {
    self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
  }
}

impl Hasher for FxHasher {
  #[inline]
  fn write(&mut self, bytes: &[u8]) {
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
      let mut word = [0u8; 8];
      word.copy_from_slice(chunk);
      self.add(u64::from_le_bytes(word));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
      let mut word = [0u8; 8];
      word[..rest.len()].copy_from_slice(rest);
      self.add(u64::from_le_bytes(word));
    }
  }

  #[inline]
  fn write_u8(&mut self, i: u8) {
    self.add(u64::from(i));
  }

  #[inline]
  fn write_u32(&mut self, i: u32) {
    self.add(u64::from(i));
  }

  #[inline]
  fn write_u64(&mut self, i: u64) {
    self.add(i);
  }

  #[inline]
  fn write_usize(&mut self, i: usize) {
    self.add(i as u64);
  }

  #[inline]
  fn finish(&self) -> u64 {
    self.hash
  }
}

/// A `HashMap` hashed with [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
  use super::*;
  use std::hash::{BuildHasher, Hash};

  fn hash_of<T: Hash>(value: T) -> u64 {
    BuildHasherDefault::<FxHasher>::default().hash_one(value)
  }

  #[test]
  fn equal_values_hash_equal_and_different_ones_differ() {
    assert_eq!(hash_of("conn-1"), hash_of("conn-1"));
    assert_ne!(hash_of("conn-1"), hash_of("conn-2"));
    assert_ne!(hash_of(1u32), hash_of(2u32));
    // The tail of a string longer than one word counts.
    assert_ne!(hash_of("abcdefgh1"), hash_of("abcdefgh2"));
  }

  #[test]
  fn a_map_works_with_it() {
    let mut map: FxHashMap<u32, &str> = FxHashMap::default();
    for i in 0..1000u32 {
      map.insert(i, "x");
    }
    assert_eq!(map.len(), 1000);
    assert!((0..1000u32).all(|i| map.contains_key(&i)));
  }
}
