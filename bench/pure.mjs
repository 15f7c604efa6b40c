// npm run bench (its last part) — the pure calls: decideFairShare with 1, 2 and 8 dimensions
// shaped as the host's enforce built them (each dimension { key, limit, consumedTotal,
// globalUsedPercent }, the allocation its stored row with the weight set), and 2 with each
// dimension's `buckets` (beyond the host); 256 distinct input objects, cycled; the engine
// (its one crossing: every field read across N-API with its path) against the same rule in
// plain JavaScript (bench/baseline/fairShare.mjs). Then the other pure calls — dimensionKeyToString,
// computeBurnRate, computeBurnRateFromWindow, getKnownPlan, knownProviders — against plain
// JavaScript (bench/baseline/pure.mjs), and, for the ones the glue remembers, the engine's
// own entry.
//
//   node bench/pure.mjs [--ops N]
import { createRequire } from 'node:module'
import { decideFairShare as baselineDecide } from './baseline/fairShare.mjs'
import * as plain from './baseline/pure.mjs'

const require = createRequire(import.meta.url)
const { decideFairShare } = require('@omniroute/quota-engine/compat/fairShare')
const { dimensionKeyToString } = require('@omniroute/quota-engine/compat/dimensions')
const { computeBurnRate, computeBurnRateFromWindow } = require('@omniroute/quota-engine/compat/burnRate')
const { getKnownPlan, knownProviders } = require('@omniroute/quota-engine/compat/planRegistry')
const native = require('../lib/native.js')

const i = process.argv.indexOf('--ops')
const OPS = i > 0 ? Number(process.argv[i + 1]) : 1_000_000
const UNITS = ['requests', 'tokens']

function inputs(dims, variant, buckets = false) {
  const dimensions = []
  const consumedByThisKey = {}
  for (let d = 0; d < dims; d++) {
    const key = { poolId: 'pool-1', unit: UNITS[d % 2], window: d < 2 ? 'hourly' : 'daily' }
    const dimension = { key, limit: 1000, consumedTotal: 400 + variant, globalUsedPercent: 0.6 }
    if (buckets) dimension.buckets = { nowMs: 1_700_000_000_000 + variant, keyPrev: 50, keyCurr: 60, poolPrev: 300, poolCurr: 100 + variant }
    dimensions.push(dimension)
    consumedByThisKey[`pool-1:${key.unit}:${key.window}`] = 100 + (variant % 200)
  }
  const allocation = { apiKeyId: `key-${variant % 3}`, weight: 25, policy: 'hard' }
  return { dimensions, allocation, consumedByThisKey, saturationThreshold: 0.5 }
}

/** The decision table's rows: [label, dimensions, with buckets]. */
const SHAPES = [['1', 1, false], ['2', 2, false], ['8', 8, false], ['2, with `buckets`', 2, true]]

/** The decision calls' runner: ns per call of `fn` over 256 distinct inputs of `dims`. */
function decisionRun(fn, dims, buckets) {
  const pool = Array.from({ length: 256 }, (_, v) => inputs(dims, v, buckets))
  let sink = 0
  return (n) => {
    const start = process.hrtime.bigint()
    for (let v = 0; v < n; v++) sink += fn(pool[v & 255]).kind.length
    if (sink === 0) throw new Error('unreachable')
    return Number(process.hrtime.bigint() - start) / n
  }
}

/** Medians of 5 runs each of `js` and `engine`, alternating, after a warm-up of each; the
 *  engine's runs `engineOps` calls long (fewer where a call costs microseconds). */
function alternatingRuns(js, engine, engineOps = OPS) {
  js(200_000)
  engine(Math.min(200_000, engineOps))
  const runs = { js: [], engine: [] }
  for (let round = 0; round < 5; round++) {
    runs.js.push(js(OPS))
    runs.engine.push(engine(engineOps))
  }
  const median = (list) => list.sort((a, b) => a - b)[2]
  return { js: median(runs.js), engine: median(runs.engine) }
}

// The same answers before timing.
for (let v = 0; v < 256; v++) {
  for (const [label, dims, buckets] of SHAPES) {
    const a = JSON.stringify(decideFairShare(inputs(dims, v, buckets)))
    const b = JSON.stringify(baselineDecide(inputs(dims, v, buckets)))
    if (a !== b) throw new Error(`decideFairShare(${label} dims, ${v}): engine ${a} ≠ baseline ${b}`)
  }
}

console.log('\ndecideFairShare, ns per call (median of 5 runs over 256 distinct inputs, plain JS and engine alternating)\n')
console.log('| dimensions | plain JS rule | engine | engine vs JS |')
console.log('|---|---|---|---|')
for (const [label, dims, buckets] of SHAPES) {
  const { js, engine } = alternatingRuns(decisionRun(baselineDecide, dims, buckets), decisionRun(decideFairShare, dims, buckets), Math.ceil(OPS / 20))
  console.log(`| ${label} | ${js.toFixed(0)} | ${engine.toFixed(0)} | ${(js / engine).toFixed(3)}× |`)
}

// --- the other pure calls ------------------------------------------------------------------
const catalog = native.knownProviders().map((provider) => native.getKnownPlan(provider))
const registry = plain.planRegistry(catalog)
const providers = [...native.knownProviders(), 'nobody']
const poolKeys = Array.from({ length: 256 }, (_, v) => ({ poolId: `pool-${v % 64}`, unit: UNITS[v % 2], window: v % 3 ? 'hourly' : 'daily' }))
const histories = (samples) => Array.from({ length: 256 }, (_, v) => Array.from({ length: samples }, (_, i) => ({ ts: 1_700_000_000_000 + 1000 * i + v, consumed: 100 * i + ((i * v) % 50) })))
const history10 = histories(10)
const history60 = histories(60)
const sizeOf = (answer) => (answer === null ? 1 : typeof answer === 'string' ? answer.length : answer.length ?? answer.tokensPerSecond ?? answer.dimensions.length)

const calls = [
  ['dimensionKeyToString', (f) => (v) => f(poolKeys[v]), dimensionKeyToString, plain.dimensionKeyToString, native.dimensionKeyToString],
  ['computeBurnRate, 10 samples', (f) => (v) => f(history10[v], 5000), computeBurnRate, plain.computeBurnRate, native.computeBurnRate],
  ['computeBurnRate, 60 samples', (f) => (v) => f(history60[v], 5000), computeBurnRate, plain.computeBurnRate, native.computeBurnRate],
  ['computeBurnRateFromWindow', (f) => (v) => f(1000 + v, 3_600_000, 5000), computeBurnRateFromWindow, plain.computeBurnRateFromWindow, native.computeBurnRateFromWindow],
  ['getKnownPlan', (f) => (v) => f(providers[v % providers.length]), getKnownPlan, registry.getKnownPlan, native.getKnownPlan],
  ['knownProviders', (f) => () => f(), knownProviders, registry.knownProviders, native.knownProviders],
]

/** A runner of `call(v)` over v = 0..255, cycled: ns per call of a run of `n` calls. */
function cycled(call) {
  let sink = 0
  return (n) => {
    const start = process.hrtime.bigint()
    for (let i = 0; i < n; i++) sink += sizeOf(call(i & 255))
    if (sink === 0) throw new Error('unreachable')
    return Number(process.hrtime.bigint() - start) / n
  }
}

// The same answers before timing (computeBurnRateFromWindow reads the clock: compared on a
// 1 ms window, where the elapsed time is always 1 ms).
for (const [name, bind, engine, js] of calls) {
  const check = name === 'computeBurnRateFromWindow' ? (f) => (v) => f(1000 + v, 1, 5000) : bind
  for (let v = 0; v < 256; v++) {
    const a = JSON.stringify(check(engine)(v))
    const b = JSON.stringify(check(js)(v))
    if (a !== b) throw new Error(`${name}(${v}): engine ${a} ≠ plain JS ${b}`)
  }
}

console.log('\nThe other pure calls, ns per call (median of 5 runs over 256 distinct inputs, plain JS and engine alternating)\n')
console.log('| call | plain JS rule | engine | engine vs JS | the engine\'s entry, unremembered |')
console.log('|---|---|---|---|---|')
for (const [name, bind, engine, js, checked] of calls) {
  // The engine's own entry (the burn rates) crosses on every call: shorter runs.
  const direct = engine === checked
  const { js: jsNs, engine: engineNs } = alternatingRuns(cycled(bind(js)), cycled(bind(engine)), direct ? Math.ceil(OPS / 20) : OPS)
  const checkedNs = direct ? '–' : cycled(bind(checked))(Math.ceil(OPS / 20)).toFixed(0)
  console.log(`| ${name} | ${jsNs.toFixed(0)} | ${engineNs.toFixed(0)} | ${(jsNs / engineNs).toFixed(3)}× | ${checkedNs} |`)
}

// napi-rs's own serde conversion of the same inputs (Env::from_js_value into a
// serde_json::Value, reading only: no decision, no answer built) against the engine's whole
// call, which reads through its own reader (docs/architecture.md#the-edge-srcbinding).
if (typeof native.__fromJsValueForBench === 'function') {
  console.log('\nReading a decideFairShare input, ns per call: napi-rs from_js_value alone against the whole engine call\n')
  console.log('| dimensions | from_js_value (read only) | engine call (read, decide, answer) |')
  console.log('|---|---|---|')
  const count = (input) => ({ length: native.__fromJsValueForBench(input) })
  for (const dims of [1, 2, 8]) {
    const pool = Array.from({ length: 256 }, (_, v) => inputs(dims, v))
    const serde = cycled((v) => count(pool[v]))
    const engine = cycled((v) => decideFairShare(pool[v]).kind)
    const n = Math.ceil(OPS / 20)
    serde(n)
    engine(n)
    const runs = { serde: [], engine: [] }
    for (let round = 0; round < 5; round++) {
      runs.serde.push(serde(n))
      runs.engine.push(engine(n))
    }
    const median = (list) => list.sort((x, y) => x - y)[2]
    console.log(`| ${dims} | ${median(runs.serde).toFixed(0)} | ${median(runs.engine).toFixed(0)} |`)
  }
}
