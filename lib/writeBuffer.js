'use strict'
// recordConsumption's buffer, as the event loop sees it: when it is committed, and the
// close that commits it last. The buffer itself, its bounds and its fault log are the
// engine's (store/sqlite/record_buffer.rs, engine/hot_path.rs).
const { isMainThread } = require('node:worker_threads')
const native = require('./native.js')
const host = require('./host.js')

// Records (and SQLite `consume`s) are committed BY TIME, not per event-loop turn: the
// first record buffered arms one unref'd timer, which commits the buffer once its oldest
// record is QUOTA_RECORD_FLUSH_MS old (the engine answers how long to wait), so in a
// server, where every request is its own turn, the records of many requests share one
// commit (docs/sqlite.md, "Records are buffered"). The recording calls also commit a due
// or full buffer themselves, so code that never yields keeps the same bound. A failed
// commit keeps the records; the engine answers the one-second back-off.
//
// Commits at the end, so a crash loses at most the last QUOTA_RECORD_FLUSH_MS of records
// (docs/reliability.md, "Durability of records"):
// - 'exit' (a normal end, process.exit(), an uncaught exception);
// - SIGTERM, SIGINT, SIGHUP on the main thread, without changing what the signal does:
//   when nobody else listens, the default is to die by the signal, so the handler commits,
//   removes itself and raises the signal again; when the host listens too, it only
//   commits and the host's handler decides. The listeners are added when the first record
//   is buffered, and signal listeners do not keep the event loop alive;
// - a worker that is terminated skips 'exit': the native side commits at the
//   environment's teardown.
const flush = { timer: null, signals: false, failing: false }
const SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP']

process.on('exit', () => {
  // The process is leaving: a failed commit is said below, not logged as a fault to retry.
  if (isMainThread) native.__exiting()
  const buffered = native.pendingQuotaWrites()
  const error = buffered === 0 ? null : native.flushQuotaWrites()
  // Said every time, not once per fault: the process is leaving with these records.
  if (error) host.log('warn', 'quota:enforce', 'buffered quota records could not be committed at exit', { buffered, error })
  // The process's connection is closed by its main thread, so the last connection to the
  // file checkpoints it and removes its WAL: the file at rest is self-contained
  // (docs/sqlite.md#the-file-at-rest). A worker's exit leaves it to the process.
  if (isMainThread) closeAtExit()
  // What the engine logged while committing and closing (a fault, records it dropped),
  // delivered now even if the exit came from inside a logger handling a record.
  try {
    host.drainLogs(true)
  } catch {
    // Leaving anyway: an exit handler must not turn the exit into a crash.
  }
})

/** Closes the database; the caller has marked the process exiting (`__exiting`). */
function closeAtExit() {
  try {
    // A record made after this (a later exit listener, a worker still running) reopens the
    // file: its thread's teardown then closes it again, so no WAL is left at rest.
    native.closeQuotaDb()
  } catch {
    // Leaving anyway; what could not be committed was said above.
  }
}

function commitAtSignal(signal) {
  let error
  let buffered = 0
  try {
    buffered = native.pendingQuotaWrites()
    if (buffered > 0) error = native.flushQuotaWrites()
  } catch (err) {
    error = host.errorText(err)
  }
  if (error) host.log('warn', 'quota:enforce', `buffered quota records could not be committed at ${signal}`, { buffered, error })
  host.drainLogs()
}

const onSignal = Object.fromEntries(
  SIGNALS.map((signal) => [
    signal,
    function quotaEngineCommitAtSignal() {
      const hostHandles = process.listenerCount(signal) > 1
      // Nobody else: the process dies by the signal, so nothing will be retried.
      if (!hostHandles) native.__exiting()
      commitAtSignal(signal)
      if (hostHandles) return
      // Restore the default (dying by the signal) and raise it again.
      closeAtExit()
      try {
        host.drainLogs() // what the close dropped
      } catch {
        // Dying anyway.
      }
      for (const s of SIGNALS) process.removeListener(s, onSignal[s])
      flush.signals = false
      process.kill(process.pid, signal)
    },
  ]),
)

function listenForSignals() {
  if (flush.signals || !isMainThread || process.platform === 'win32') return
  flush.signals = true
  // First in line: a host's process.once() wrapper is removed just before it runs, so ours
  // must run while it is still registered to see that the host handles the signal.
  for (const signal of SIGNALS) process.prependListener(signal, onSignal[signal])
}

function scheduleFlush() {
  if (flush.timer) return
  listenForSignals()
  // Never commit inside the recording call's own turn (the engine does that itself when
  // the buffer is due): the first timer asks the engine how long is left.
  arm(0)
}

function askEngine() {
  try {
    return native.flushDueQuotaWrites()
  } finally {
    host.drainLogs()
  }
}

function arm(wait) {
  if (!(wait >= 0)) return
  flush.timer = setTimeout(runTimer, Math.max(1, Math.ceil(wait)))
  flush.timer.unref()
}

function runTimer() {
  flush.timer = null
  let wait
  try {
    wait = askEngine()
    flush.failing = false
  } catch (err) {
    // The engine's own fault (a caught panic): not an uncaught exception in the host's
    // process. Said once until a commit works again; retried every second meanwhile.
    if (!flush.failing) host.log('warn', 'quota:enforce', 'the scheduled commit of buffered quota records failed; retrying every second', { error: host.errorText(err) })
    flush.failing = true
    wait = 1000
  }
  arm(wait)
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
    error = host.errorText(err)
  }
  host.drainLogs()
  return error || null
}

/**
 * `closeQuotaDb()`: commits the buffered records (waiting up to the busy timeout for a
 * lock), then closes the engine's connection; the next call reopens. Records that cannot
 * be committed (the file is gone) are dropped with a warning, logged before it returns.
 */
function closeQuotaDb() {
  try {
    native.closeQuotaDb()
  } finally {
    host.drainLogs()
  }
}

module.exports = { scheduleFlush, listenForSignals, flushQuotaWrites, closeQuotaDb }
