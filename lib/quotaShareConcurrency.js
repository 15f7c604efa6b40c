'use strict'
// The quota-share backlog queue (docs/contract.md §10): a FIFO semaphore per connection, with a
// bounded queue and a queue timeout, that fails open.
//
// Why JavaScript and not Rust: this is the queueing of JavaScript promises on the event
// loop, not an algorithm over data. Every operation is "resolve this promise now" or "after
// this timer", which only JavaScript can do; a Rust version would hold the promises'
// resolvers as references, drive them through thread-safe functions, and still need
// JavaScript timers (or a native timer thread that must not keep the process alive) — more
// crossings and more ways to leak, for a counter and a queue. The state is per isolate,
// like the promises it holds.
//
// Invariants: `active` counts the slots held on a connection; a waiter is either queued or
// settled, never both; a settled waiter is never handed a slot (so one that timed out
// never holds one); a slot is handed from a release straight to the head of the queue;
// a lane with nothing active or queued is deleted; timers are unref'd.

const { typeError, rangeError } = require('./invalidArg.js')

const COMPONENT = 'quota:scheduler'
/** setTimeout's longest delay: a longer one fires after 1 ms, so longer waits are cut to it. */
const MAX_TIMER_MS = 2 ** 31 - 1
/** A queue timeout not given: the host's semaphore's own default. */
const DEFAULT_QUEUE_TIMEOUT_MS = 30_000

/** `"qsconn:<id>"`: the key of a connection's queue. */
function quotaShareConcurrencyKey(connectionId) {
  return `qsconn:${connectionId}`
}

/** key → { active, waiters: Set (insertion order = FIFO, O(1) removal on timeout) } */
const lanes = new Map()

/**
 * Says that a caller proceeds without a slot: to the host's combo logger as its module did
 * (`log.warn("COMBO", text)`), else one JSON line on stderr.
 */
function warn(log, fields, why) {
  const { connectionId, cap } = fields
  const text = `Quota-share concurrency: connection ${connectionId} gate saturated (cap=${cap}, ${why}) — proceeding without a slot`
  try {
    if (log && typeof log.warn === 'function') {
      log.warn('COMBO', text)
      return
    }
  } catch {
    return // a throwing logger changes nothing
  }
  process.stderr.write(`${JSON.stringify({ level: 'warn', component: COMPONENT, ...fields, msg: text })}\n`)
}

function readLimit(options, name, absent) {
  const value = options[name]
  if (value === undefined || value === null) return absent
  if (typeof value !== 'number') throw typeError(`options.${name}`, 'a number', value)
  if (Number.isNaN(value) || value < 0) throw rangeError(`options.${name}`, `must be a number >= 0, got ${value}`)
  return value
}

function deleteIfIdle(key, lane) {
  if (lane.active === 0 && lane.waiters.size === 0 && lanes.get(key) === lane) lanes.delete(key)
}

function releaser(key, lane) {
  let released = false
  return () => {
    if (released) return
    released = true
    lane.active--
    handOff(key, lane)
  }
}

/** Gives free slots to the waiters at the head of the queue, in order. */
function handOff(key, lane) {
  for (const waiter of lane.waiters) {
    if (lane.active >= waiter.cap) break
    lane.waiters.delete(waiter)
    waiter.settled = true
    if (waiter.timer !== undefined) clearTimeout(waiter.timer)
    lane.active++
    waiter.resolve(releaser(key, lane))
  }
  deleteIfIdle(key, lane)
}

/**
 * Waits FIFO for one of `cap` slots on the target's connection: see index.d.ts
 * (docs/contract.md §10).
 */
async function acquireQuotaShareConcurrencySlot(target, cap, options, log) {
  const connectionId = target === null || target === undefined ? undefined : target.connectionId
  if (typeof connectionId !== 'string' || connectionId === '') return null
  if (cap === undefined || cap === null) return null
  if (typeof cap !== 'number') throw typeError('cap', 'a number', cap)
  if (!(cap > 0)) return null // ≤ 0 or NaN: no cap
  if (options !== undefined && options !== null && typeof options !== 'object') {
    throw typeError('options', 'an object', options)
  }
  const queueTimeoutMs = readLimit(options ?? {}, 'queueTimeoutMs', DEFAULT_QUEUE_TIMEOUT_MS)
  const maxQueueSize = readLimit(options ?? {}, 'maxQueueSize', Infinity)

  const key = quotaShareConcurrencyKey(connectionId)
  let lane = lanes.get(key)
  if (lane === undefined) {
    lane = { active: 0, waiters: new Set() }
    lanes.set(key, lane)
  }
  if (lane.waiters.size === 0 && lane.active < cap) {
    lane.active++
    return releaser(key, lane)
  }
  if (lane.waiters.size >= maxQueueSize) {
    warn(log, { connectionId, cap, active: lane.active, queued: lane.waiters.size, maxQueueSize }, `queue full at ${maxQueueSize}`)
    deleteIfIdle(key, lane)
    return null
  }
  return new Promise((resolve) => {
    const waiter = { cap, resolve, settled: false, timer: undefined }
    lane.waiters.add(waiter)
    if (Number.isFinite(queueTimeoutMs)) {
      waiter.timer = setTimeout(() => {
        if (waiter.settled) return
        waiter.settled = true
        lane.waiters.delete(waiter)
        warn(log, { connectionId, cap, active: lane.active, queued: lane.waiters.size, queueTimeoutMs }, `waited ${queueTimeoutMs} ms`)
        resolve(null)
        // The waiter may have been the head blocking others with a larger cap.
        handOff(key, lane)
      }, Math.min(queueTimeoutMs, MAX_TIMER_MS))
      waiter.timer.unref?.()
    }
  })
}

module.exports = { quotaShareConcurrencyKey, acquireQuotaShareConcurrencySlot }
