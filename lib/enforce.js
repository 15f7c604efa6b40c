'use strict'
// The hot path (docs/contract.md §7): each call is one crossing into the engine, which
// picks the driver, does the pool lookup, the plan and every dimension, decides, counts
// and fails open on its own faults. This file turns its answers into the host's shapes,
// awaits the host's saturation fetchers when the engine asks, schedules the buffered
// records' commit, and emits `quota.exceeded`.
const native = require('./native.js')
const host = require('./host.js')
const { getSaturation, refreshInBackground } = require('./saturation.js')
const writes = require('./writeBuffer.js')

// The engine's numeric answers (src/binding/hot_path.rs): an allow of each kind, and a
// record's bits — left buffered, log records waiting. (While the driver is being chosen
// the engine answers with a promise that settles after the choice.)
const BUFFERED = 1
const LOGS_WAITING = 2
// Records wait in Redis's write-behind buffer (the engine flushes it): commit at a signal.
const WRITE_BEHIND = 4
const ALLOWS = [() => ({ kind: 'allow' }), () => ({ kind: 'allow', deprioritize: false }), () => ({ kind: 'allow', deprioritize: true })]

function isPromise(value) {
  return value !== null && typeof value === 'object' && typeof value.then === 'function'
}

const text = (value) => (typeof value === 'string' ? value : undefined)
const number = (value) => (typeof value === 'number' ? value : undefined)
// A cost amount as the host's store counted it: a number, or a string as a number (its
// REAL column reads "100" as 100; "", "abc" and SQLite's 0 for "0x10", "0b1", "0o7" count
// nothing, though JavaScript's Number() reads those three).
const amount = (value) => (typeof value !== 'string' ? number(value) : /0[box]/i.test(value) ? 0 : Number(value))
// `cost.requests` absent counts 1; an amount counts only when finite and > 0, so NaN and
// ±Infinity count nothing (the engine reads a non-finite amount as absent).
const requests = (value) => (typeof value === 'number' && !Number.isFinite(value) ? 0 : value)

/** The step an answer is about to become: saturation entries the engine served past their
 * 30 s are refreshed in the background; the request does not wait for them. */
function stepOf(step) {
  if (typeof step === 'object' && step.refresh) refreshInBackground(step.refresh)
  return step
}

/**
 * An enforce crossing: its answer now (the common case: no promise is made for it), or a
 * promise of it.
 */
function enforceStep(input, provider, afterFetch, startedMs) {
  // Arguments spelled out, not spread from an array: this runs on every request.
  const answer = input
    ? native.enforce(text(input.apiKeyId), text(input.connectionId), provider, text(input.model), number(input.estimatedCost), number(input.estimatedTokens), startedMs, afterFetch)
    : native.enforce(undefined, undefined, provider, undefined, undefined, undefined, startedMs, afterFetch)
  return isPromise(answer) ? answer.then(stepOf) : stepOf(answer)
}

/** A failure caught here: the engine logs it once per fault and counts an enforce one. */
function failed(operation, msg, err, input) {
  try {
    const apiKeyId = input && typeof input.apiKeyId === 'string' ? input.apiKeyId : undefined
    native.failOpen(operation, msg, host.errorText(err), apiKeyId)
    host.drainLogs()
  } catch {
    host.log('warn', 'quota:enforce', msg, { error: host.errorText(err) })
  }
}

function shape(step, input, provider) {
  if (step.logs) host.forwardLogs(step.logs)
  if (step.kind === 'allow') {
    const result = step.deprioritize === undefined ? { kind: 'allow' } : { kind: 'allow', deprioritize: step.deprioritize }
    if (step.reservation !== undefined) result.reservation = step.reservation
    return result
  }
  const result = { kind: 'block', reason: step.reason, httpStatus: 429 }
  if (step.retryAfterSeconds !== undefined) result.retryAfterSeconds = step.retryAfterSeconds
  const payload = { apiKeyId: input.apiKeyId, provider, connectionId: input.connectionId, reason: step.code }
  if (step.code === 'model-cap') payload.model = input.model
  host.emitQuotaEvent('quota.exceeded', payload)
  return result
}

/**
 * `enforceQuotaShare({ apiKeyId, connectionId, provider, model?, estimatedCost? })` →
 * `{ kind: "allow", deprioritize? } | { kind: "block", reason, httpStatus: 429,
 * retryAfterSeconds? }`. Never rejects: any internal error allows and logs a warning.
 *
 * With `QUOTA_ADMISSION=reserve` (beyond the contract) the allow also reserves the
 * estimated cost — 1 request, `estimatedCost` USD, `estimatedTokens` tokens — and carries
 * `reservation`, for `recordConsumption({ …, reservation })` or `releaseReservation`.
 */
async function enforceQuotaShare(input) {
  try {
    const provider = input && input.provider != null ? String(input.provider) : ''
    let step = enforceStep(input, provider, false)
    if (isPromise(step)) step = await step
    if (typeof step === 'object' && step.kind === 'fetch') {
      if (step.logs) host.forwardLogs(step.logs)
      await Promise.all(step.fetch.map(([unit, window]) => getSaturation(input.connectionId, provider, { unit, window })))
      step = await enforceStep(input, provider, true, step.startedMs)
    }
    return typeof step === 'number' ? ALLOWS[step]() : shape(step, input, provider)
  } catch (err) {
    failed('enforce', 'quota enforcement failed; allowing the request', err)
    return { kind: 'allow' }
  }
}

/**
 * `recordConsumption({ apiKeyId, connectionId, provider, model?, cost: { tokens?, usd?,
 * requests? } })`: adds the cost to every plan dimension of the matching pool (and the
 * model bucket) — buffered on SQLite, one script on Redis. Never rejects. With a
 * `reservation` (reserve mode), settles it with the cost instead.
 */
async function recordConsumption(input) {
  try {
    if (!input || typeof input.apiKeyId !== 'string' || !input.apiKeyId || typeof input.connectionId !== 'string' || !input.connectionId) return
    const cost = input.cost || {}
    const reservation = input.reservation ?? undefined
    if (reservation !== undefined && typeof reservation !== 'string') {
      host.log('warn', 'quota:enforce', 'settling a quota reservation failed', {
        apiKeyId: input.apiKeyId,
        error: 'reservation: must be a string',
      })
      return
    }
    const provider = input.provider != null ? String(input.provider) : ''
    let answer = native.record(input.apiKeyId, input.connectionId, provider, text(input.model), amount(cost.tokens), amount(cost.usd), requests(amount(cost.requests)), reservation)
    if (isPromise(answer)) answer = await answer
    if (answer & BUFFERED) writes.scheduleFlush()
    else if (answer & WRITE_BEHIND) writes.listenForSignals()
    if (answer & LOGS_WAITING) host.drainLogs()
  } catch (err) {
    failed('record', 'recording quota consumption failed', err, input)
  }
}

/**
 * `releaseReservation(reservation)` (reserve mode, beyond the contract): the request an
 * allow reserved for did not happen — subtracts what was reserved from the reservation's
 * own buckets (never below 0). Call it instead of `recordConsumption`; a reservation takes
 * effect once, and one already settled, released, expired or unknown is refused with a
 * warning (docs/admission.md). Rejects with a `TypeError`/`RangeError`
 * (`ERR_QUOTA_INVALID_ARG`) for a value that is not a reservation, writing nothing; a
 * store failure is logged and resolves.
 */
async function releaseReservation(reservation) {
  try {
    const answer = native.releaseReservation(reservation)
    if (isPromise(answer)) await answer
  } finally {
    host.drainLogs()
  }
}


/**
 * Warns through the caller's `log` (pino-like), or the host's logger when it has none or
 * it throws: the helpers that never reject use it for their own failures.
 */
function warnVia(log, err, msg) {
  const fields = { err: host.errorText(err) }
  try {
    if (log && typeof log.warn === 'function') return void log.warn(fields, msg)
  } catch {
    // A throwing logger: the host's instead.
  }
  host.log('warn', 'quota:enforce', msg, fields)
}

/** Runs `recordConsumption(input)` on the next turn of the event loop; returns at once. */
function scheduleRecordConsumption(input, log) {
  setImmediate(() => {
    recordConsumption(input).catch((err) => warnVia(log, err, 'scheduled quota record failed'))
  })
}

/** `{ tokens: prompt + completion (each as Number() reads it; not finite → 0), usd: max(estimatedCost, 0), requests: 1 }`. */
function buildConsumptionCost(usage, estimatedCost) {
  const finite = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : 0)
  // As the host reads a usage: numeric strings count ("10" is 10); anything else is 0.
  const count = (v) => finite(Number(v ?? 0))
  const tokens = usage && typeof usage === 'object' ? count(usage.prompt_tokens) + count(usage.completion_tokens) : 0
  return { tokens, usd: Math.max(finite(estimatedCost), 0), requests: 1 }
}

/**
 * Records a finished stream: nothing without an apiKeyId and connectionId or when
 * `streamStatus !== 200`; a throwing `calculateCost` counts as 0. Never rejects. Reserve
 * mode (beyond the contract): `params.reservation` is settled with the stream's cost, or
 * released when `streamStatus !== 200`.
 */
async function recordStreamingConsumption(params, deps) {
  deps = deps ?? {}
  const warn = (err) => {
    let log
    try {
      log = deps.log
    } catch {
      // A throwing getter or a revoked Proxy: the host's logger instead.
    }
    warnVia(log, err, 'streaming quota record failed')
  }
  try {
    if (!params) return
    const reservation = typeof params.reservation === 'string' ? params.reservation : undefined
    // A request that did not happen gives its reservation back, whoever it names.
    if (params.streamStatus !== 200 && reservation !== undefined) await releaseReservation(reservation)
    if (!params.apiKeyId || !params.connectionId || params.streamStatus !== 200) return
    const provider = params.provider ?? 'unknown'
    let usd = 0
    // No usage, no price to ask for: the stream still counts its request.
    if (params.streamUsage && typeof params.streamUsage === 'object') {
      try {
        usd = await deps.calculateCost(provider, params.model, params.streamUsage, { serviceTier: params.serviceTier })
      } catch {
        usd = 0
      }
    }
    const schedule = typeof deps.schedule === 'function' ? deps.schedule : scheduleRecordConsumption
    schedule(
      {
        apiKeyId: params.apiKeyId,
        connectionId: params.connectionId,
        provider,
        model: params.model || undefined,
        cost: buildConsumptionCost(params.streamUsage, usd),
        ...(reservation !== undefined ? { reservation } : {}),
      },
      deps.log,
    )
  } catch (err) {
    warn(err)
  }
}

/** `QUOTA_SOFT_DEPRIORITIZE_FACTOR` (default 0.7, clamped 0..1); a bad value warns once. */
function softPenaltyFactor() {
  const factor = native.softPenaltyFactor()
  host.drainLogs()
  return factor
}

module.exports = {
  enforceQuotaShare,
  recordConsumption,
  releaseReservation,
  scheduleRecordConsumption,
  buildConsumptionCost,
  recordStreamingConsumption,
  softPenaltyFactor,
}
