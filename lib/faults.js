'use strict'
// The hot path's fault log (CONTRACT §7, §12): the first failure of an operation warns, the
// ones after it are counted, its next success logs that it recovered.
const host = require('./host.js')

// One warning per fault, not one per call: a store that is down (locked past the busy
// timeout, its disk full, its folder unusable) fails every call the same way, and a warning
// per request would flood the host's log at request rate. The first failure of an operation
// warns; the ones after it are counted; its next success logs, at info, that it recovered and
// how many calls failed open meanwhile — and re-arms the warning for the next fault.
const faults = { enforce: null, record: null, flush: null }

function failOpen(operation, msg, err, context) {
  const fault = faults[operation]
  if (fault) {
    fault.count++
    return
  }
  faults[operation] = { count: 1, since: Date.now() }
  host.log('warn', 'quota:enforce', `${msg} (further failures are counted until it recovers)`, {
    ...context,
    error: String((err && err.message) || err),
  })
}

function succeeded(operation) {
  const fault = faults[operation]
  if (!fault) return
  faults[operation] = null
  host.log('info', 'quota:enforce', `quota ${operation} recovered`, {
    failedCalls: fault.count,
    failingForMs: Date.now() - fault.since,
  })
}

module.exports = { failOpen, succeeded }
