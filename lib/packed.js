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

module.exports = { isArrayToPack }
