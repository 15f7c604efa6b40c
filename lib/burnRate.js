'use strict'
// computeBurnRate and computeBurnRateFromWindow (docs/contract.md §9) at the cost of the same
// formula in plain JavaScript: crossing an array of objects into the engine cost a hundred
// times the arithmetic, so — as for decideFairShare — the input is read here into one
// Float64Array and computed by one plain N-API call (src/binding/burn_rate.rs). Only the
// reading is here: input this does not recognise as well-formed (a sample that is not an
// object with numeric `ts` and `consumed`, a `remaining` that is not a number, more samples
// than the buffer holds, a `windowMs` the engine rejects) goes to the engine's checked entry,
// which computes it or names the offending field in its error. The formulas exist once, in
// the engine.
const native = require('./native.js')

const { buffer, fromHistory, fromWindow, header: HEADER, maxSamples: MAX_SAMPLES } = native.__burnRateCrossing()

const isNumber = (value) => typeof value === 'number'

/** The answer the crossing wrote back. */
function answer() {
  const timeToExhaustionMs = buffer[1]
  return { tokensPerSecond: buffer[0], timeToExhaustionMs: timeToExhaustionMs === timeToExhaustionMs ? timeToExhaustionMs : null }
}

// Whether a history is being packed: a sample's getter computing a burn rate of its own
// takes the checked way, since the buffer holds the outer call's samples.
let packing = false

/** Packs `history`'s samples; false when one is not plainly well-formed. */
function pack(history) {
  const count = history.length
  buffer[0] = count
  for (let i = 0, at = HEADER; i < count; i++, at += 2) {
    const sample = history[i]
    if (typeof sample !== 'object' || sample === null) return false
    const { ts, consumed } = sample
    if (!isNumber(ts) || !isNumber(consumed)) return false
    buffer[at] = ts
    buffer[at + 1] = consumed
  }
  return true
}

/**
 * The exponential moving average (α = 0.3) of the per-second rates between consecutive
 * `{ ts, consumed }` samples: `{ tokensPerSecond, timeToExhaustionMs }`. Malformed input
 * throws the engine's `TypeError`/`RangeError` (`code: "ERR_QUOTA_INVALID_ARG"`).
 */
function computeBurnRate(history, remaining) {
  if (packing || !Array.isArray(history) || history.length > MAX_SAMPLES || (remaining != null && !isNumber(remaining))) {
    return native.computeBurnRate(history, remaining)
  }
  packing = true
  let packed
  try {
    packed = pack(history)
  } catch {
    // A getter that throws: the checked entry reads it again and names it.
    packed = false
  } finally {
    packing = false
  }
  if (!packed) return native.computeBurnRate(history, remaining)
  buffer[1] = remaining ?? NaN
  fromHistory()
  return answer()
}

/**
 * The rate implied by `consumedTotal` spent since the current bucket of a `windowMs` window
 * began: `{ tokensPerSecond, timeToExhaustionMs }`. Malformed input throws the engine's
 * `TypeError`/`RangeError` (`code: "ERR_QUOTA_INVALID_ARG"`).
 */
function computeBurnRateFromWindow(consumedTotal, windowMs, remaining) {
  if (!isNumber(consumedTotal) || !isNumber(windowMs) || (remaining != null && !isNumber(remaining))) {
    return native.computeBurnRateFromWindow(consumedTotal, windowMs, remaining)
  }
  buffer[0] = consumedTotal
  buffer[1] = windowMs
  buffer[2] = remaining ?? NaN
  fromWindow()
  // NaN: a window the engine rejects; its checked entry says why.
  if (buffer[0] !== buffer[0]) return native.computeBurnRateFromWindow(consumedTotal, windowMs, remaining)
  return answer()
}

module.exports = { computeBurnRate, computeBurnRateFromWindow }
