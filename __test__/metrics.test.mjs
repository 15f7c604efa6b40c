// metrics(): the Prometheus text exposition (version 0.0.4) of the hot path's counters,
// checked by a parser of the format written here (HELP/TYPE lines, sample syntax,
// histogram buckets) and by the counts that real enforce calls leave in it.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import {
  metrics,
  installHost,
  createPool,
  closeQuotaDb,
  enforceQuotaShare,
  recordConsumption,
  getSaturation,
  _clearSaturationCache,
} from '@omniroute/quota-engine'
import * as esm from '@omniroute/quota-engine'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-metrics-'))
const dbPath = path.join(dir, 'storage.sqlite')
const warnings = []
const logger = { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} }

before(() => {
  installHost({ dbPath, logger, saturationFetchers: { kimi: async () => 0.9 } })
})

after(() => {
  closeQuotaDb()
  fs.rmSync(dir, { recursive: true, force: true })
})

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(-?\d+))?$/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/y
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped'])

function parseValue(text, line) {
  if (text === '+Inf') return Infinity
  if (text === '-Inf') return -Infinity
  if (text === 'NaN') return NaN
  assert.match(text, /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/, `a float value: ${line}`)
  return Number(text)
}

function parseLabels(text, line) {
  const labels = {}
  if (text === undefined || text === '') return labels
  LABEL.lastIndex = 0
  while (LABEL.lastIndex < text.length) {
    const start = LABEL.lastIndex
    const m = LABEL.exec(text)
    assert.ok(m && m.index === start, `label syntax at ${JSON.stringify(text.slice(start))}: ${line}`)
    assert.equal(labels[m[1]], undefined, `duplicate label ${m[1]}: ${line}`)
    labels[m[1]] = m[2].replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\')
    if (m[3] === '') break
  }
  assert.equal(LABEL.lastIndex, text.length, `trailing label text: ${line}`)
  return labels
}

/**
 * Parses and validates a text exposition: families with their HELP, TYPE and samples.
 * Throws (an assertion) on any line that breaks the format.
 */
function parseExposition(text) {
  assert.ok(text.endsWith('\n'), 'ends with a line feed')
  const families = new Map()
  const family = (name) => {
    if (!families.has(name)) families.set(name, { name, help: null, type: null, samples: [] })
    return families.get(name)
  }
  const familyOf = (sampleName) => {
    for (const suffix of ['_bucket', '_sum', '_count']) {
      const base = sampleName.slice(0, -suffix.length)
      if (sampleName.endsWith(suffix) && families.get(base)?.type === 'histogram') return families.get(base)
    }
    return families.get(sampleName)
  }
  for (const line of text.slice(0, -1).split('\n')) {
    assert.notEqual(line, '', 'no empty lines')
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line)
      if (!m) continue // a plain comment
      const [, kind, name, rest] = m
      assert.match(name, METRIC_NAME, line)
      const f = family(name)
      assert.equal(f.samples.length, 0, `${kind} before the samples of ${name}`)
      if (kind === 'HELP') {
        assert.equal(f.help, null, `one HELP for ${name}`)
        f.help = rest
      } else {
        assert.equal(f.type, null, `one TYPE for ${name}`)
        assert.ok(TYPES.has(rest), `known type: ${line}`)
        f.type = rest
      }
      continue
    }
    const m = SAMPLE.exec(line)
    assert.ok(m, `sample syntax: ${line}`)
    const [, name, labelText, valueText] = m
    const f = familyOf(name)
    assert.ok(f && f.type, `sample of a declared family: ${line}`)
    f.samples.push({ name, labels: parseLabels(labelText, line), value: parseValue(valueText, line) })
  }
  for (const f of families.values()) {
    assert.ok(f.help && f.type, `${f.name} has HELP and TYPE`)
    assert.ok(f.samples.length > 0, `${f.name} has samples`)
    if (f.type === 'counter') {
      assert.ok(f.name.endsWith('_total'), `counter ${f.name} ends in _total`)
      for (const s of f.samples) assert.ok(s.value >= 0, `${s.name} ≥ 0`)
    }
    if (f.type === 'histogram') {
      const buckets = f.samples.filter((s) => s.name === `${f.name}_bucket`)
      const les = buckets.map((b) => parseValue(b.labels.le, `le of ${f.name}`))
      for (let i = 1; i < buckets.length; i++) {
        assert.ok(les[i] > les[i - 1], `${f.name}: le ascending`)
        assert.ok(buckets[i].value >= buckets[i - 1].value, `${f.name}: cumulative counts never decrease`)
      }
      assert.equal(les.at(-1), Infinity, `${f.name} ends with le="+Inf"`)
      const count = f.samples.find((s) => s.name === `${f.name}_count`)
      const sum = f.samples.find((s) => s.name === `${f.name}_sum`)
      assert.ok(count && sum, `${f.name} has _count and _sum`)
      assert.equal(buckets.at(-1).value, count.value, `${f.name}: +Inf bucket = _count`)
    }
  }
  return families
}

function value(families, name, labels = {}) {
  const f = families.get(name) ?? families.get(name.replace(/_(sum|count|bucket)$/, ''))
  assert.ok(f, `family ${name}`)
  const s = f.samples.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))
  assert.ok(s, `${name}${JSON.stringify(labels)}`)
  return s.value
}

function histogramCount(families) {
  return value(families, 'quota_engine_enforce_duration_seconds_count')
}

test('the exposition parses, with every family the contract of metrics() names', () => {
  const families = parseExposition(metrics())
  for (const [name, type] of [
    ['quota_engine_decisions_total', 'counter'],
    ['quota_engine_enforce_duration_seconds', 'histogram'],
    ['quota_engine_store_errors_total', 'counter'],
    ['quota_engine_fail_open_total', 'counter'],
    ['quota_engine_saturation_cache_hits_total', 'counter'],
    ['quota_engine_saturation_cache_misses_total', 'counter'],
    ['quota_engine_record_commits_total', 'counter'],
    ['quota_engine_redis_view_hits_total', 'counter'],
    ['quota_engine_redis_view_misses_total', 'counter'],
    ['quota_engine_redis_view_disconnects_total', 'counter'],
    ['quota_engine_redis_view_tracking', 'gauge'],
  ]) {
    assert.equal(families.get(name)?.type, type, name)
  }
  // Known reasons are there from the start, at their current value.
  value(families, 'quota_engine_decisions_total', { kind: 'block', reason: 'fair-share' })
  value(families, 'quota_engine_decisions_total', { kind: 'allow', reason: 'ok' })
})

test('the parser rejects what the format forbids (it can fail)', () => {
  assert.throws(() => parseExposition('# TYPE a counter\na_total 1\n'), /declared family/)
  assert.throws(() => parseExposition('# HELP a_total x\n# TYPE a_total counter\na_total{l="x} 1\n'))
  assert.throws(() => parseExposition('# HELP a_total x\n# TYPE a_total counter\na_total one\n'))
  const histogram = (lines) => `# HELP h x\n# TYPE h histogram\n${lines}\n`
  assert.throws(() => parseExposition(histogram('h_bucket{le="1"} 3\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 2')), /never decrease/)
  assert.throws(() => parseExposition(histogram('h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3')), /_count/)
  assert.throws(() => parseExposition(histogram('h_bucket{le="1"} 1\nh_bucket{le="2"} 2\nh_sum 1\nh_count 2')), /\+Inf/)
  parseExposition(histogram('h_bucket{le="0.5"} 1\nh_bucket{le="+Inf"} 2\nh_sum 1.5\nh_count 2'))
})

test('enforce decisions are counted by kind and reason, each with one latency observation', async () => {
  const pool = createPool({
    connectionId: 'conn-m',
    name: 'metrics',
    allocations: [
      { apiKeyId: 'key-heavy', weight: 50, policy: 'hard' },
      { apiKeyId: 'key-light', weight: 50, policy: 'hard' },
    ],
  })
  assert.ok(pool.id)
  // key-heavy takes 800 of kimi's 1,500 requests: over its 750 share while the upstream
  // reports 90 % (strict mode).
  await recordConsumption({ apiKeyId: 'key-heavy', connectionId: 'conn-m', provider: 'kimi', cost: { requests: 800 } })
  const before = parseExposition(metrics())
  const blocked = await enforceQuotaShare({ apiKeyId: 'key-heavy', connectionId: 'conn-m', provider: 'kimi' })
  assert.equal(blocked.kind, 'block')
  const allowed = await enforceQuotaShare({ apiKeyId: 'key-light', connectionId: 'conn-m', provider: 'kimi' })
  assert.deepEqual(allowed, { kind: 'allow', deprioritize: false })
  const unknown = await enforceQuotaShare({ apiKeyId: 'key-none', connectionId: 'conn-m', provider: 'kimi' })
  assert.deepEqual(unknown, { kind: 'allow' })
  const afterCalls = parseExposition(metrics())
  const delta = (labels) =>
    value(afterCalls, 'quota_engine_decisions_total', labels) - value(before, 'quota_engine_decisions_total', labels)
  assert.equal(delta({ kind: 'block', reason: 'fair-share' }), 1)
  assert.equal(delta({ kind: 'allow', reason: 'ok' }), 1)
  assert.equal(delta({ kind: 'allow', reason: 'not-enforced' }), 1)
  assert.equal(delta({ kind: 'block', reason: 'global-saturated' }), 0)
  assert.equal(histogramCount(afterCalls) - histogramCount(before), 3)
  assert.ok(value(afterCalls, 'quota_engine_enforce_duration_seconds_sum') > value(before, 'quota_engine_enforce_duration_seconds_sum'))
})

test('saturation lookups count cache hits and misses', async () => {
  _clearSaturationCache()
  const before = parseExposition(metrics())
  assert.equal(await getSaturation('conn-sat', 'kimi', { unit: 'requests', window: 'hourly' }), 0.9)
  assert.equal(await getSaturation('conn-sat', 'kimi', { unit: 'requests', window: 'hourly' }), 0.9)
  assert.equal(await getSaturation('conn-sat', 'kimi', { unit: 'requests', window: 'hourly' }), 0.9)
  const afterCalls = parseExposition(metrics())
  const delta = (name) => value(afterCalls, name) - value(before, name)
  assert.equal(delta('quota_engine_saturation_cache_misses_total'), 1)
  assert.equal(delta('quota_engine_saturation_cache_hits_total'), 2)
})

test('a store that cannot open counts a store error and a fail-open allow', async () => {
  const before = parseExposition(metrics())
  closeQuotaDb()
  // A path under a regular file: the engine cannot create the database there.
  const blocker = path.join(dir, 'not-a-folder')
  fs.writeFileSync(blocker, 'x')
  installHost({ dbPath: path.join(blocker, 'storage.sqlite'), logger })
  try {
    const result = await enforceQuotaShare({ apiKeyId: 'key-heavy', connectionId: 'conn-m', provider: 'kimi' })
    assert.deepEqual(result, { kind: 'allow' })
    await recordConsumption({ apiKeyId: 'key-heavy', connectionId: 'conn-m', provider: 'kimi', cost: { requests: 1 } })
  } finally {
    closeQuotaDb()
    installHost({ dbPath, logger, saturationFetchers: { kimi: async () => 0.9 } })
  }
  const afterCalls = parseExposition(metrics())
  const delta = (name, labels) => value(afterCalls, name, labels) - value(before, name, labels)
  assert.equal(delta('quota_engine_fail_open_total'), 1)
  assert.equal(delta('quota_engine_decisions_total', { kind: 'allow', reason: 'fail-open' }), 1)
  assert.equal(delta('quota_engine_store_errors_total', { operation: 'enforce' }), 1)
  assert.equal(delta('quota_engine_store_errors_total', { operation: 'record' }), 1)
  assert.ok(warnings.some((w) => w.component === 'quota:enforce'))
})

test('metrics is exported by the main entry through import and require alike', () => {
  assert.equal(typeof esm.metrics, 'function')
  assert.equal(esm.metrics, require('@omniroute/quota-engine').metrics)
  assert.equal(typeof metrics(), 'string')
})
