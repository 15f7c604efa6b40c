'use strict'
// The JavaScript side of src/binding/errors.rs, for the few checks made in lib/ before a
// crossing: a TypeError/RangeError whose message starts with the offending field's path
// and whose `code` is ERR_QUOTA_INVALID_ARG — the same shape the native functions throw.

function typeName(value) {
  return value === null ? 'null' : typeof value
}

/** A TypeError: `field` should be `what` (e.g. "a string") but is something else. */
function typeError(field, what, value) {
  const err = new TypeError(`${field}: expected ${what}, got ${typeName(value)}`)
  err.code = 'ERR_QUOTA_INVALID_ARG'
  return err
}

/** A RangeError: `field` has the right type but a value that is not allowed. */
function rangeError(field, message) {
  const err = new RangeError(`${field}: ${message}`)
  err.code = 'ERR_QUOTA_INVALID_ARG'
  return err
}

module.exports = { typeError, rangeError }
