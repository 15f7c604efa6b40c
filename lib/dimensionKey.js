'use strict'
// dimensionKeyToString (docs/contract.md §1) at the cost of a template string in plain
// JavaScript: the engine writes and validates each key's string once (a key it rejects
// throws from there, every time), and it is remembered per pool, unit and window. Only keys
// the engine accepted are remembered, so a hit is always a valid key. Bounded: a caller
// inventing pool ids cannot grow it past MAX_POOLS, nor with ids longer than
// MAX_REMEMBERED_ID (those are answered by the engine each time).
const native = require('./native.js')

const MAX_POOLS = 4096
const MAX_REMEMBERED_ID = 128
// poolId → unit → window → the string.
const keyStrings = new Map()

/** The string of a key whose fields were read already (the engine's on the first call). */
function keyString(poolId, unit, window) {
  let perPool = keyStrings.get(poolId)
  const known = perPool?.get(unit)?.get(window)
  if (known !== undefined) return known
  const text = native.dimensionKeyToString({ poolId, unit, window })
  if (poolId.length > MAX_REMEMBERED_ID) return text
  if (perPool === undefined) {
    if (keyStrings.size >= MAX_POOLS) keyStrings.clear()
    perPool = new Map()
    keyStrings.set(poolId, perPool)
  }
  let perUnit = perPool.get(unit)
  if (perUnit === undefined) {
    perUnit = new Map()
    perPool.set(unit, perUnit)
  }
  perUnit.set(window, text)
  return text
}

/** The string form of a dimension key, `"<poolId>:<unit>:<window>"`. */
function dimensionKeyToString(key) {
  if (typeof key !== 'object' || key === null) return native.dimensionKeyToString(key)
  // Each field is read once, and the engine is given what was read: what is remembered is
  // exactly what it answered for. A getter that throws ends the call with its exception.
  const { poolId, unit, window } = key
  return keyString(poolId, unit, window)
}

module.exports = { dimensionKeyToString }
