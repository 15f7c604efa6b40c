'use strict'
// What the packed crossings of lib/fairShare.js and lib/burnRate.js share
// (docs/api.md#the-pure-functions).

// Taken once: what the glue calls an array does not change with a later Array.isArray.
const { isArray } = Array

/** Whether `value` is an array to pack (a Proxy of one too); a revoked Proxy, which makes
 *  Array.isArray throw, is not (the checked entry's error names it). */
function isArrayToPack(value) {
  try {
    return isArray(value)
  } catch {
    return false
  }
}

const isNumber = (value) => typeof value === 'number'

/** How many elements of `array` to pack, or -1 when not a whole count of at most `max` (a
 *  Proxy's length is its trap's answer, read once here). */
function countToPack(array, max) {
  const count = array.length
  return (count | 0) === count && count >= 0 && count <= max ? count : -1
}

module.exports = { isArrayToPack, isNumber, countToPack }
