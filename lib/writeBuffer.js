'use strict'
// recordConsumption's buffer, as the event loop sees it: when it is committed, and the
// close that commits it last. The buffer itself, its bounds and its fault log are the
// engine's (store/sqlite/record_buffer.rs, engine/hot_path.rs).
const native = require('./native.js')
const host = require('./host.js')

// Every thread that buffered a record commits on its next event-loop turn (scheduled
// here) and when it exits — normally, by process.exit() or by an uncaught exception. (A
// worker that is terminated, or a process killed by a signal without a handler, skips
// 'exit': the native side commits at the environment's teardown where it still runs.) A
// failed commit keeps the records and is retried after a second.
const flush = { scheduled: false, retry: null }
const RETRY_FLUSH_MS = 1000

process.on('exit', () => {
  const buffered = native.pendingQuotaWrites()
  if (buffered === 0) return
  const error = native.flushQuotaWrites()
  // Said every time, not once per fault: the process is leaving with these records.
  if (error) host.log('warn', 'quota:enforce', 'buffered quota records could not be committed at exit', { buffered, error })
})

function scheduleFlush() {
  if (flush.scheduled || flush.retry) return
  flush.scheduled = true
  setImmediate(runScheduledFlush)
}

function runScheduledFlush() {
  flush.scheduled = false
  flush.retry = null
  if (flushQuotaWrites()) {
    flush.retry = setTimeout(runScheduledFlush, RETRY_FLUSH_MS)
    flush.retry.unref()
  }
}

function stopRetrying() {
  if (flush.retry) {
    clearTimeout(flush.retry)
    flush.retry = null
  }
}

/**
 * `flushQuotaWrites()` (beyond the contract): commits the records buffered by
 * `recordConsumption` now, so other connections see them (the engine's own reads always
 * do). Returns `null`, or the error message (the records stay buffered, for the next
 * flush; the failure is logged once per fault). Never throws.
 */
function flushQuotaWrites() {
  let error
  try {
    error = native.flushQuotaWrites()
  } catch (err) {
    error = String((err && err.message) || err)
  }
  host.drainLogs()
  if (!error) stopRetrying()
  return error || null
}

/**
 * `closeQuotaDb()`: commits the buffered records (waiting up to the busy timeout for a
 * lock), then closes the engine's connection; the next call reopens. Records that cannot
 * be committed (the file is gone) are dropped with a warning, logged before it returns.
 */
function closeQuotaDb() {
  stopRetrying()
  try {
    native.closeQuotaDb()
  } finally {
    host.drainLogs()
  }
}

module.exports = { scheduleFlush, flushQuotaWrites, closeQuotaDb }
