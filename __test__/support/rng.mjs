// A small deterministic generator (xorshift) for generated test inputs, so a failure replays.
export function rng(seed) {
  let x = seed >>> 0 || 1
  return () => {
    x ^= x << 13; x >>>= 0
    x ^= x >>> 17
    x ^= x << 5; x >>>= 0
    return x / 2 ** 32
  }
}
