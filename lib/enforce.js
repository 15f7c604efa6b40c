'use strict'
// The hot path (CONTRACT §7): each call is one crossing into Rust, which does the pool
// lookup, the plan and every dimension — synchronous on SQLite (where records are buffered
// and committed together, see writeBuffer.js), a promise after one Redis round trip on Redis
// (the store `getQuotaStore()` chose). This file turns the result into
// the host's shapes, fetches saturation through the host's async fetchers on a cache miss,
// emits `quota.exceeded`, and fails open on the engine's own faults.
const native = require('../binding.js')
const host = require('./host.js')
const { getSaturation } = require('./saturation.js')
const metrics = require('./metrics.js')
const stores = require('./stores.js')
const { RedisQuotaStore } = require('./redisQuotaStore.js')
const { failOpen, succeeded } = require('./faults.js')
const writes = require('./writeBuffer.js')

const ALLOW = Object.freeze({ kind: 'allow' })

function urlOf(store) {
  return store instanceof RedisQuotaStore ? store.url : null
}

/**
 * The Redis URL of the chosen store, `null` for SQLite: a value once chosen (no extra
 * await on the SQLite path), a promise for the first call, which chooses.
 */
function redisUrl() {
  const store = stores.chosenStore()
  return store ? urlOf(store) : stores.getQuotaStore().then(urlOf)
}

/**
 * One crossing: the step on SQLite, the step or a promise of it on Redis. With `estimate`
 * (reserve mode, `{ usd, tokens }`), the crossing that decides and reserves atomically.
 */
function enforceStep(url, apiKeyId, connectionId, provider, model, threshold, estimate) {
  if (estimate) {
    if (url === null) {
      return native.reserveStep(apiKeyId, connectionId, provider, model, threshold, estimate.usd, estimate.tokens)
    }
    return native.redisReserveStep(url, apiKeyId, connectionId, provider, model, threshold, estimate.usd, estimate.tokens)
  }
  if (url === null) return native.enforceStep(apiKeyId, connectionId, provider, model, threshold)
  return native.redisEnforceStep(url, apiKeyId, connectionId, provider, model, threshold)
}

function isPromise(value) {
  return value !== null && typeof value === 'object' && typeof value.then === 'function'
}

function isNonEmptyString(value) {
  return typeof value === 'string' && value !== ''
}

// The number the SQLite crossing answers an allow with (see `enforceStep`).
const ALLOW_CODES = ['not-enforced', 'ok', 'deprioritized']

function allowOfCode(code, started) {
  metrics.decision('allow', ALLOW_CODES[code], started)
  return code === 0 ? { kind: 'allow' } : { kind: 'allow', deprioritize: code === 2 }
}

function toResult(step, input, provider, started) {
  if (typeof step === 'number') return allowOfCode(step, started)
  if (step.kind === 'allow') {
    if (step.deprioritize === undefined) {
      metrics.decision('allow', 'not-enforced', started)
      return { kind: 'allow' }
    }
    metrics.decision('allow', step.deprioritize ? 'deprioritized' : 'ok', started)
    const result = { kind: 'allow', deprioritize: step.deprioritize }
    if (step.reservation !== undefined) result.reservation = step.reservation
    return result
  }
  metrics.decision('block', step.code, started)
  const result = { kind: 'block', reason: step.reason, httpStatus: 429 }
  if (step.retryAfterSeconds !== undefined) result.retryAfterSeconds = step.retryAfterSeconds
  const payload = { apiKeyId: input.apiKeyId, provider, connectionId: input.connectionId, reason: step.code }
  if (step.code === 'model-cap') payload.model = input.model
  host.emitQuotaEvent('quota.exceeded', payload)
  return result
}

async function fetchMissing(input, step) {
  await Promise.all(
    step.fetch.map(([unit, window]) => getSaturation(input.connectionId, input.provider, { unit, window })),
  )
}

function allowFailingOpen(started) {
  metrics.failOpen()
  metrics.decision('allow', 'fail-open', started)
  return { kind: 'allow' }
}

/**
 * `enforceQuotaShare({ apiKeyId, connectionId, provider, model?, estimatedCost? })` →
 * `{ kind: "allow", deprioritize? } | { kind: "block", reason, httpStatus: 429,
 * retryAfterSeconds? }`. Never rejects: any internal error allows and logs a warning.
 *
 * With `QUOTA_ADMISSION=reserve` (beyond the contract) the same decision is made and, on
 * an allow, the estimated cost — 1 request, `estimatedCost` USD, `estimatedTokens` tokens
 * — is added in the same atomic step; the allow then carries `reservation`, for
 * `recordConsumption({ …, reservation })` or `releaseReservation(reservation)`.
 */
async function enforceQuotaShare(input) {
  const started = metrics.start()
  try {
    if (!input || !isNonEmptyString(input.apiKeyId) || !isNonEmptyString(input.connectionId)) {
      metrics.decision('allow', 'not-enforced', started)
      return ALLOW
    }
    const provider = String(input.provider ?? '')
    const model = typeof input.model === 'string' ? input.model : undefined
    const threshold = host.config.saturationThreshold()
    let url = redisUrl()
    if (isPromise(url)) url = await url
    const estimate =
      host.config.admission() === 'reserve'
        ? { usd: nonNegativeOrUndefined(input.estimatedCost), tokens: nonNegativeOrUndefined(input.estimatedTokens) }
        : undefined
    let step = enforceStep(url, input.apiKeyId, input.connectionId, provider, model, threshold, estimate)
    if (isPromise(step)) step = await step
    if (step.logs) host.forwardLogs(step.logs)
    if (step.kind === 'fetch') {
      await fetchMissing({ ...input, provider }, step)
      step = enforceStep(url, input.apiKeyId, input.connectionId, provider, model, threshold, estimate)
      if (isPromise(step)) step = await step
      if (step.logs) host.forwardLogs(step.logs)
      // Still missing (a fetcher registered meanwhile): decide without waiting again.
      if (step.kind === 'fetch') {
        metrics.decision('allow', 'saturation-pending', started)
        return ALLOW
      }
    }
    if (step.kind === 'error') {
      metrics.storeError('enforce')
      failOpen('enforce', 'quota enforcement failed; allowing the request', step.reason, {
        apiKeyId: input.apiKeyId,
        connectionId: input.connectionId,
      })
      return allowFailingOpen(started)
    }
    succeeded('enforce')
    return toResult(step, input, provider, started)
  } catch (err) {
    failOpen('enforce', 'quota enforcement failed; allowing the request', err, {})
    return allowFailingOpen(started)
  }
}

function finiteOrUndefined(value) {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined
}

function nonNegativeOrUndefined(value) {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined
}

function invalidReservation(message) {
  const err = new TypeError(message)
  err.code = 'ERR_QUOTA_INVALID_ARG'
  return err
}

/**
 * Settles or releases a reservation on the chosen store: one crossing, one transaction
 * (SQLite) or one script (Redis). Throws (synchronously or as a rejection of the awaited
 * crossing) `ERR_QUOTA_INVALID_ARG` for a malformed reservation; resolves to a store
 * error's message or `null`.
 */
async function settle(reservation, apiKeyId, cost, release) {
  if (typeof reservation !== 'string') throw invalidReservation('reservation: must be a string')
  let url = redisUrl()
  if (isPromise(url)) url = await url
  const args = [reservation, apiKeyId, finiteOrUndefined(cost.tokens), finiteOrUndefined(cost.usd), finiteOrUndefined(cost.requests), release]
  let error = url === null ? native.settleStep(...args) : native.redisSettleStep(url, ...args)
  if (isPromise(error)) error = await error
  return error
}

/**
 * `recordConsumption({ apiKeyId, connectionId, provider, model?, cost: { tokens?, usd?,
 * requests? } })`: adds the cost to every plan dimension of the matching pool (and the
 * model bucket), in one transaction (SQLite) or one script (Redis). Never rejects.
 */
async function recordConsumption(input) {
  try {
    if (!input || !isNonEmptyString(input.apiKeyId) || !isNonEmptyString(input.connectionId)) return
    const cost = input.cost || {}
    if (input.reservation !== undefined && input.reservation !== null) {
      // Reserve mode: `actual − reserved` per counter, into the reservation's buckets. A
      // malformed reservation (or another key's) writes nothing and is logged.
      let error
      try {
        error = await settle(input.reservation, input.apiKeyId, cost, false)
      } catch (err) {
        error = err
      }
      if (error && error.code === 'ERR_QUOTA_INVALID_ARG') {
        // The host's bug, not a store fault: said every time, never counted as a fault.
        host.log('warn', 'quota:enforce', 'settling a quota reservation failed', {
          apiKeyId: input.apiKeyId,
          error: String(error.message),
        })
      } else if (error) {
        metrics.storeError('record')
        failOpen('record', 'settling a quota reservation failed', error, { apiKeyId: input.apiKeyId })
      } else {
        succeeded('record')
      }
      return
    }
    const args = [
      input.apiKeyId,
      input.connectionId,
      String(input.provider ?? ''),
      typeof input.model === 'string' ? input.model : undefined,
      finiteOrUndefined(cost.tokens),
      finiteOrUndefined(cost.usd),
      finiteOrUndefined(cost.requests),
    ]
    let url = redisUrl()
    if (isPromise(url)) url = await url
    let error = url === null ? native.recordStep(...args, host.config.recordFlushMs()) : native.redisRecordStep(url, ...args)
    if (isPromise(error)) error = await error
    if (error === true) {
      writes.scheduleFlush()
      error = null
    }
    if (error) {
      metrics.storeError('record')
      failOpen('record', 'recording quota consumption failed', error, { apiKeyId: input.apiKeyId })
      // SQLite keeps a record it could not commit: it goes with the next flush.
      if (url === null) writes.scheduleFlush()
    } else {
      succeeded('record')
    }
  } catch (err) {
    failOpen('record', 'recording quota consumption failed', err, {})
  }
}

/**
 * `releaseReservation(reservation)` (reserve mode, beyond the contract): the request an
 * allow reserved for did not happen (the upstream call failed, the client went away) —
 * subtracts what was reserved from the reservation's own buckets (never below 0). Call it
 * instead of `recordConsumption`, once. Rejects with a `TypeError`/`RangeError`
 * (`ERR_QUOTA_INVALID_ARG`) for a value that is not a reservation, writing nothing; a
 * store failure is logged (`quota:enforce`) and resolves, like `recordConsumption`.
 */
async function releaseReservation(reservation) {
  const error = await settle(reservation, undefined, {}, true)
  if (error) {
    metrics.storeError('record')
    failOpen('record', 'releasing a quota reservation failed', error, {})
  } else {
    succeeded('record')
  }
}

/** Runs `recordConsumption(input)` on the next turn of the event loop; returns at once. */
function scheduleRecordConsumption(input, log) {
  setImmediate(() => {
    recordConsumption(input).catch((err) => {
      const logger = log || { warn: (obj, msg) => host.log('warn', 'quota:enforce', msg, obj) }
      logger.warn({ err: String(err && err.message) }, 'scheduled quota record failed')
    })
  })
}

/** `{ tokens: prompt + completion (non-numeric → 0), usd: max(estimatedCost, 0), requests: 1 }`. */
function buildConsumptionCost(usage, estimatedCost) {
  const number = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : 0)
  const tokens = number(usage && usage.prompt_tokens) + number(usage && usage.completion_tokens)
  return { tokens, usd: Math.max(number(estimatedCost), 0), requests: 1 }
}

/**
 * Records a finished stream: nothing without an apiKeyId and connectionId or when
 * `streamStatus !== 200`; a throwing `calculateCost` counts as 0. Never rejects. Reserve
 * mode (beyond the contract): `params.reservation` is passed on to the record (settled),
 * or released when `streamStatus !== 200`.
 */
async function recordStreamingConsumption(params, deps = {}) {
  try {
    if (!params || !params.apiKeyId || !params.connectionId) return
    // Reserve mode (beyond the contract): a stream's reservation is settled with its cost,
    // or released when the stream failed.
    const reservation = typeof params.reservation === 'string' ? params.reservation : undefined
    if (params.streamStatus !== 200) {
      if (reservation !== undefined) await releaseReservation(reservation)
      return
    }
    const provider = params.provider || 'unknown'
    let usd = 0
    try {
      usd = await deps.calculateCost(provider, params.model, params.streamUsage, { serviceTier: params.serviceTier })
    } catch {
      usd = 0
    }
    const schedule = typeof deps.schedule === 'function' ? deps.schedule : scheduleRecordConsumption
    schedule(
      {
        apiKeyId: params.apiKeyId,
        connectionId: params.connectionId,
        provider,
        model: params.model,
        cost: buildConsumptionCost(params.streamUsage, usd),
        ...(reservation !== undefined ? { reservation } : {}),
      },
      deps.log,
    )
  } catch (err) {
    ;(deps.log || { warn: (obj, msg) => host.log('warn', 'quota:enforce', msg, obj) }).warn(
      { err: String(err && err.message) },
      'streaming quota record failed',
    )
  }
}

/** `QUOTA_SOFT_DEPRIORITIZE_FACTOR` (default 0.7, 0..1). */
function softPenaltyFactor() {
  return host.config.softDeprioritizeFactor()
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
