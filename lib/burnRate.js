'use strict'
// computeBurnRate and computeBurnRateFromWindow (docs/contract.md §9) at the cost of the same
// formula in plain JavaScript: crossing an array of objects into the engine cost a hundred
// times the arithmetic, so — as for decideFairShare — the input is read here into a
// Float64Array and computed by one plain N-API call with no argument
// (src/binding/burn_rate.rs). Only the reading is here: input this does not recognise as
// well-formed (not a plain array of objects with numeric `ts` and `consumed`, a `remaining`
// that is not a number, more samples than the buffer holds, a `windowMs` the engine rejects)
// goes to the engine's checked entry, which computes it or names the offending field in its
// error. The formulas exist once, in the engine.
const native = require('./native.js')
const { isArrayToPack, isNumber, countToPack } = require('./packed.js')

// This thread's buffers: memory of the engine's, so a call crosses with no argument; one per
// kind of call, so that a window computed from inside a history's getter leaves the
// history's packing alone. `null` where the runtime allows no external buffers: every call
// takes the checked entry there.
const { historyBuffer, windowBuffer, fromHistory, fromWindow, header: HEADER, maxSamples: MAX_SAMPLES } = native.__burnRateCrossing()
// The history buffer's last slot counts packings, for every copy of this module (a test
// runner resetting its modules loads a second one, which gets the same buffers). Each call
// bumps it before packing and must find its own number there after: otherwise a nested
// call (a sample's getter calling back, into this copy or another) packed in between, and
// the checked entry answers. A count, not a flag, so a packing cut short (a vm timeout)
// leaves nothing behind.
const PACKINGS = historyBuffer === null ? 0 : historyBuffer.length - 1

/** The answer the crossing wrote back into `buffer`. */
function answer(buffer) {
  const timeToExhaustionMs = buffer[1]
  return { tokensPerSecond: buffer[0], timeToExhaustionMs: timeToExhaustionMs === timeToExhaustionMs ? timeToExhaustionMs : null }
}

/** Packs `history`'s `count` samples; false when one is not plainly well-formed. */
function pack(history, count) {
  historyBuffer[0] = count
  for (let i = 0, at = HEADER; i < count; i++, at += 2) {
    const sample = history[i]
    if (typeof sample !== 'object' || sample === null) return false
    const { ts, consumed } = sample
    if (!isNumber(ts) || !isNumber(consumed)) return false
    historyBuffer[at] = ts
    historyBuffer[at + 1] = consumed
  }
  return true
}

/**
 * The exponential moving average (α = 0.3) of the per-second rates between consecutive
 * `{ ts, consumed }` samples: `{ tokensPerSecond, timeToExhaustionMs }`. Malformed input
 * throws the engine's `TypeError`/`RangeError` (`code: "ERR_QUOTA_INVALID_ARG"`).
 */
function computeBurnRate(history, remaining) {
  if (historyBuffer === null || !isArrayToPack(history) || (remaining != null && !isNumber(remaining))) {
    return native.computeBurnRate(history, remaining)
  }
  const count = countToPack(history, MAX_SAMPLES)
  if (count < 0) return native.computeBurnRate(history, remaining)
  const packing = historyBuffer[PACKINGS] + 1
  historyBuffer[PACKINGS] = packing
  // A getter that throws ends the call with its own exception, as in the checked entry.
  if (!pack(history, count) || historyBuffer[PACKINGS] !== packing) return native.computeBurnRate(history, remaining)
  // From here to the answer no code of the caller's runs.
  historyBuffer[1] = remaining ?? NaN
  fromHistory()
  return answer(historyBuffer)
}

/**
 * The rate implied by `consumedTotal` spent since the current bucket of a `windowMs` window
 * began: `{ tokensPerSecond, timeToExhaustionMs }`. Malformed input throws the engine's
 * `TypeError`/`RangeError` (`code: "ERR_QUOTA_INVALID_ARG"`).
 */
function computeBurnRateFromWindow(consumedTotal, windowMs, remaining) {
  // (A view whose length reads 0 is detached: Node copies an external buffer on transfer
  // instead, but another runtime may not.)
  if (windowBuffer === null || windowBuffer.length === 0 || !isNumber(consumedTotal) || !isNumber(windowMs) || (remaining != null && !isNumber(remaining))) {
    return native.computeBurnRateFromWindow(consumedTotal, windowMs, remaining)
  }
  windowBuffer[0] = consumedTotal
  windowBuffer[1] = windowMs
  windowBuffer[2] = remaining ?? NaN
  fromWindow()
  // NaN: a window the engine rejects; its checked entry says why.
  if (windowBuffer[0] !== windowBuffer[0]) return native.computeBurnRateFromWindow(consumedTotal, windowMs, remaining)
  return answer(windowBuffer)
}

module.exports = { computeBurnRate, computeBurnRateFromWindow }
