'use strict'
// decideFairShare (docs/contract.md §3) as the host calls it: many times a request, with a
// small object. Crossing an object into the engine costs forty times the decision, so the
// input is read here, field by field, into one Float64Array and decided by one plain N-API
// call that allocates nothing (src/binding/fair_share.rs). Only the reading is here: input
// this does not recognise as well-formed — a missing field, a wrong type, an unknown unit,
// policy or window, more dimensions than the buffer holds — goes to the engine's checked
// entry, which decides it or names the offending field in its error. The rule and the
// validation exist once, in the engine.
const native = require('./native.js')
const { isArrayToPack, isNumber, countToPack } = require('./packed.js')
const { keyString } = require('./dimensionKey.js')

const LAYOUT = native.__fairShareLayout()
const { header: HEADER, stride: STRIDE, maxDimensions: MAX_DIMENSIONS } = LAYOUT
const codes = (names) => new Map(names.map((name, code) => [name, code]))
const UNITS = codes(LAYOUT.units)
const WINDOWS = codes(LAYOUT.windows)
const POLICIES = codes(LAYOUT.policies)
// This thread's buffer: memory of the engine's, so a decision crosses with no argument.
// `null` where the runtime allows no external buffers: every call takes the checked entry
// there. Its last slot counts packings, for every copy of this module (a test runner
// resetting its modules loads a second one, which gets the same buffer): each decision
// bumps it before packing and must find its own number there after, or a nested decision
// (a getter calling back, into this copy or another) packed in between and the checked
// entry decides. A count, not a flag, so a packing cut short leaves nothing behind.
const { buffer, decide } = native.__fairShareCrossing()
const PACKINGS = buffer === null ? 0 : buffer.length - 1

const isObject = (value) => typeof value === 'object' && value !== null

/** Packs `input` into the buffer; false when it is not plainly well-formed. */
function pack(input) {
  if (!isObject(input)) return false
  const { dimensions, allocation, consumedByThisKey: consumed, saturationThreshold } = input
  if (!isArrayToPack(dimensions) || !isObject(allocation)) return false
  const count = countToPack(dimensions, MAX_DIMENSIONS)
  if (count < 0) return false
  if (!isNumber(saturationThreshold) || (consumed != null && !isObject(consumed))) return false
  const { weight, capValue, capUnit, policy } = allocation
  const policyCode = POLICIES.get(policy)
  if (!isNumber(weight) || policyCode === undefined) return false
  if (capValue != null && !isNumber(capValue)) return false
  let capUnitCode = -1
  if (capUnit != null && (capUnitCode = UNITS.get(capUnit) ?? -2) < 0) return false
  buffer[0] = count
  buffer[1] = saturationThreshold
  buffer[2] = weight
  buffer[3] = capValue == null ? 0 : 1
  buffer[4] = capValue ?? 0
  buffer[5] = capUnitCode
  buffer[6] = policyCode
  for (let i = 0, at = HEADER; i < count; i++, at += STRIDE) {
    const dim = dimensions[i]
    if (!isObject(dim) || !isObject(dim.key)) return false
    const { poolId, unit: unitName, window: windowName } = dim.key
    const unit = UNITS.get(unitName)
    const window = WINDOWS.get(windowName)
    if (typeof poolId !== 'string') return false
    const { limit, consumedTotal, globalUsedPercent, buckets } = dim
    if (unit === undefined || window === undefined || !isNumber(limit) || !isNumber(consumedTotal) || !isNumber(globalUsedPercent)) return false
    let mine = 0
    if (consumed != null) {
      mine = consumed[keyString(poolId, unitName, windowName)] ?? 0
      if (!isNumber(mine)) return false
    }
    buffer[at] = unit
    buffer[at + 1] = window
    buffer[at + 2] = limit
    buffer[at + 3] = consumedTotal
    buffer[at + 4] = globalUsedPercent
    buffer[at + 5] = mine
    if (buckets == null) {
      buffer[at + 6] = 0
    } else {
      if (!isObject(buckets)) return false
      const { nowMs, keyPrev, keyCurr, poolPrev, poolCurr } = buckets
      if (!isNumber(nowMs) || !isNumber(keyPrev) || !isNumber(keyCurr) || !isNumber(poolPrev) || !isNumber(poolCurr)) return false
      buffer[at + 6] = 1
      buffer[at + 7] = nowMs
      buffer[at + 8] = keyPrev
      buffer[at + 9] = keyCurr
      buffer[at + 10] = poolPrev
      buffer[at + 11] = poolCurr
    }
  }
  return true
}

// The decision of each outcome code, in the engine's words.
const OUTCOMES = LAYOUT.outcomes.map(([kind, reason, penalized]) => ({ kind, reason, penalized }))

/**
 * The work-conserving fair-share decision (docs/contract.md §3), synchronous and pure:
 * `{ kind, reason, penalized?, retryAfterMs? }`. Malformed input throws the engine's
 * `TypeError`/`RangeError` (`code: "ERR_QUOTA_INVALID_ARG"`) naming the field.
 */
function decideFairShare(input) {
  if (buffer === null) return native.decideFairShare(input)
  const packing = buffer[PACKINGS] + 1
  buffer[PACKINGS] = packing
  // A getter that throws ends the call with its own exception, as in the checked entry.
  if (!pack(input) || buffer[PACKINGS] !== packing) return native.decideFairShare(input)
  // From here to the answer no code of the caller's runs.
  decide()
  const outcome = OUTCOMES[buffer[0]]
  if (outcome.penalized) return { kind: outcome.kind, reason: outcome.reason, penalized: true }
  const retryAfterMs = buffer[1]
  if (retryAfterMs === retryAfterMs) return { kind: outcome.kind, reason: outcome.reason, retryAfterMs }
  return { kind: outcome.kind, reason: outcome.reason }
}

module.exports = { decideFairShare }
