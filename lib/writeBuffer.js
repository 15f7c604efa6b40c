'use strict'
// recordConsumption's buffer, as JavaScript sees it: when it is committed, and the close
// that commits it last.
const native = require('../binding.js')
const host = require('./host.js')
const metrics = require('./metrics.js')
const { failOpen, succeeded } = require('./faults.js')

// SQLite records are buffered in the engine (store/sqlite/record_buffer.rs) and committed together:
// once per turn of the event loop of every thread that buffered one (scheduled here), and
// at exit. A failed flush keeps the records buffered and is retried after a second; it
// warns once per fault, like the hot path's own failures.
const flush = { scheduled: false, retry: null }
const RETRY_FLUSH_MS = 1000

// Every thread that loads the engine commits the buffer when it exits — normally, by
// process.exit() or by an uncaught exception — whoever buffered it. (A worker that is
// terminated, or a process killed by a signal without a handler, skips 'exit': the native
// side commits at the environment's teardown where it still runs; a SIGKILL loses it.)
process.on('exit', () => {
  const buffered = native.pendingQuotaWrites()
  if (buffered === 0) return
  const error = commit()
  // Said every time, not once per fault: the process is leaving with these records.
  if (error) host.log('warn', 'quota:enforce', 'buffered quota records could not be committed at exit', { buffered, error })
})

/** The native flush: `null`, or the error message. */
function commit() {
  try {
    return native.flushQuotaWrites()
  } catch (err) {
    return String((err && err.message) || err)
  }
}

function scheduleFlush() {
  if (flush.scheduled || flush.retry) return
  flush.scheduled = true
  setImmediate(runScheduledFlush)
}

function runScheduledFlush() {
  flush.scheduled = false
  flush.retry = null
  const error = flushQuotaWrites()
  if (error) {
    flush.retry = setTimeout(runScheduledFlush, RETRY_FLUSH_MS)
    flush.retry.unref()
  }
}

/**
 * `flushQuotaWrites()` (beyond the contract): commits the records buffered by
 * `recordConsumption` now, so other connections see them (the engine's own reads always
 * do). Returns `null`, or the error message (the records stay buffered, for the next
 * flush); logs a failure once per fault. Never throws.
 */
function flushQuotaWrites() {
  const error = commit()
  if (error) {
    metrics.storeError('record')
    failOpen('flush', 'committing buffered quota records failed; they stay buffered and are retried', error, {
      buffered: native.pendingQuotaWrites(),
    })
    return error
  }
  if (flush.retry) {
    clearTimeout(flush.retry)
    flush.retry = null
  }
  succeeded('flush')
  return null
}

/**
 * `closeQuotaDb()`: commits the buffered records (waiting up to the busy timeout for a
 * lock), then closes the engine's connection; the next call reopens. Records that cannot
 * be committed (the file is gone) are dropped with a warning, logged before it returns.
 * Throws what closing itself throws.
 */
function closeQuotaDb() {
  if (flush.retry) {
    clearTimeout(flush.retry)
    flush.retry = null
  }
  try {
    native.closeQuotaDb()
  } finally {
    host.forwardLogs(native.takeLogs())
  }
}

module.exports = { scheduleFlush, flushQuotaWrites, closeQuotaDb }
