'use strict'
// Counters behind `metrics()`: Prometheus text exposition, version 0.0.4. The hot path
// updates plain numbers (no allocation per call); the text is built only when scraped.

// Upper bounds (seconds) of the enforce latency histogram: 10 µs … 1 s. A decision that
// needs no saturation fetch takes a few microseconds; one that awaits a host fetcher takes
// as long as the fetcher.
const LATENCY_BOUNDS = Object.freeze([
  0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
  0.5, 1,
])

// Reasons known in advance are exported at 0 from the start, so a rate() over them works
// before the first occurrence.
const ALLOW_REASONS = ['ok', 'deprioritized', 'not-enforced', 'saturation-pending', 'fail-open']
const BLOCK_REASONS = ['fair-share', 'cap-absolute', 'global-saturated', 'model-cap']

const state = {
  allow: new Map(ALLOW_REASONS.map((reason) => [reason, 0])),
  block: new Map(BLOCK_REASONS.map((reason) => [reason, 0])),
  latencyCounts: new Float64Array(LATENCY_BOUNDS.length + 1),
  latencySum: 0,
  storeErrors: new Map([
    ['enforce', 0],
    ['record', 0],
  ]),
  failOpen: 0,
  saturationHits: 0,
  saturationMisses: 0,
}

const clock = typeof performance === 'object' && performance ? performance : require('node:perf_hooks').performance

/** A start time for `decision(…)`, in milliseconds. */
function start() {
  return clock.now()
}

/** One `enforceQuotaShare` outcome and its latency since `startedMs`. */
function decision(kind, reason, startedMs) {
  const counts = kind === 'block' ? state.block : state.allow
  counts.set(reason, (counts.get(reason) || 0) + 1)
  const seconds = (clock.now() - startedMs) / 1000
  let i = 0
  while (i < LATENCY_BOUNDS.length && seconds > LATENCY_BOUNDS[i]) i++
  state.latencyCounts[i]++
  state.latencySum += seconds
}

/** An error the native store reported (`operation`: `enforce` or `record`). */
function storeError(operation) {
  state.storeErrors.set(operation, (state.storeErrors.get(operation) || 0) + 1)
}

/** `enforceQuotaShare` allowed a request because of an internal error. */
function failOpen() {
  state.failOpen++
}

/** A `getSaturation` lookup answered from the 30 s cache (`true`) or fetched (`false`). */
function saturationLookup(hit) {
  if (hit) state.saturationHits++
  else state.saturationMisses++
}

function escapeLabel(value) {
  return String(value).replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"')
}

function formatNumber(value) {
  if (Number.isNaN(value)) return 'NaN'
  if (value === Infinity) return '+Inf'
  if (value === -Infinity) return '-Inf'
  return String(value)
}

function family(lines, name, type, help) {
  lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`)
}

/**
 * The engine's metrics in the Prometheus text exposition format (version 0.0.4), for a
 * `/metrics` endpoint (`Content-Type: text/plain; version=0.0.4`).
 */
function metrics() {
  const lines = []
  family(lines, 'quota_engine_decisions_total', 'counter', 'enforceQuotaShare decisions by kind and reason.')
  for (const [kind, counts] of [
    ['allow', state.allow],
    ['block', state.block],
  ]) {
    for (const [reason, count] of counts) {
      lines.push(`quota_engine_decisions_total{kind="${kind}",reason="${escapeLabel(reason)}"} ${formatNumber(count)}`)
    }
  }
  family(
    lines,
    'quota_engine_enforce_duration_seconds',
    'histogram',
    'Time from the enforceQuotaShare call to its decision, saturation fetches included.',
  )
  let cumulative = 0
  for (let i = 0; i <= LATENCY_BOUNDS.length; i++) {
    cumulative += state.latencyCounts[i]
    const le = i < LATENCY_BOUNDS.length ? formatNumber(LATENCY_BOUNDS[i]) : '+Inf'
    lines.push(`quota_engine_enforce_duration_seconds_bucket{le="${le}"} ${formatNumber(cumulative)}`)
  }
  lines.push(`quota_engine_enforce_duration_seconds_sum ${formatNumber(state.latencySum)}`)
  lines.push(`quota_engine_enforce_duration_seconds_count ${formatNumber(cumulative)}`)
  family(lines, 'quota_engine_store_errors_total', 'counter', 'Errors reported by the quota store, by hot-path operation.')
  for (const [operation, count] of state.storeErrors) {
    lines.push(`quota_engine_store_errors_total{operation="${escapeLabel(operation)}"} ${formatNumber(count)}`)
  }
  family(lines, 'quota_engine_fail_open_total', 'counter', 'Requests allowed because enforcement failed internally.')
  lines.push(`quota_engine_fail_open_total ${formatNumber(state.failOpen)}`)
  family(
    lines,
    'quota_engine_saturation_cache_hits_total',
    'counter',
    'getSaturation lookups answered from the 30 s cache.',
  )
  lines.push(`quota_engine_saturation_cache_hits_total ${formatNumber(state.saturationHits)}`)
  family(
    lines,
    'quota_engine_saturation_cache_misses_total',
    'counter',
    'getSaturation lookups that called a saturation fetcher (or the header fallback).',
  )
  lines.push(`quota_engine_saturation_cache_misses_total ${formatNumber(state.saturationMisses)}`)
  return `${lines.join('\n')}\n`
}

module.exports = { metrics, start, decision, storeError, failOpen, saturationLookup, LATENCY_BOUNDS }
