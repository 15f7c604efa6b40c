// npm run bench (its last part) — the pure calls as the host makes them: decideFairShare with
// 1, 2 and 8 dimensions (256 distinct input objects, cycled), the engine
// against the same rule in plain JavaScript (bench/baseline/fairShare.mjs), and the engine's
// checked entry (every field read across N-API with its path: the way every call went before
// the packed crossing).
//
//   node bench/pure.mjs [--ops N]
import { createRequire } from 'node:module'
import { decideFairShare as baselineDecide } from './baseline/fairShare.mjs'

const require = createRequire(import.meta.url)
const { decideFairShare } = require('@omniroute/quota-engine/compat/fairShare')
const native = require('../lib/native.js')

const i = process.argv.indexOf('--ops')
const OPS = i > 0 ? Number(process.argv[i + 1]) : 1_000_000
const UNITS = ['requests', 'tokens']

function inputs(dims, variant) {
  const dimensions = []
  const consumedByThisKey = {}
  for (let d = 0; d < dims; d++) {
    const key = { poolId: 'pool-1', unit: UNITS[d % 2], window: d < 2 ? 'hourly' : 'daily' }
    dimensions.push({ key, limit: 1000, consumedTotal: 400 + variant, globalUsedPercent: 0.6, buckets: { nowMs: 1_700_000_000_000 + variant, keyPrev: 50, keyCurr: 60, poolPrev: 300, poolCurr: 100 + variant } })
    consumedByThisKey[`pool-1:${key.unit}:${key.window}`] = 100 + (variant % 200)
  }
  return { dimensions, allocation: { weight: 25, policy: 'hard' }, consumedByThisKey, saturationThreshold: 0.5 }
}

function nsPerCall(fn, dims, ops = OPS) {
  const pool = Array.from({ length: 256 }, (_, v) => inputs(dims, v))
  let sink = 0
  const run = (n) => {
    const start = process.hrtime.bigint()
    for (let v = 0; v < n; v++) sink += fn(pool[v & 255]).kind.length
    return Number(process.hrtime.bigint() - start) / n
  }
  run(Math.min(ops, 200_000))
  const samples = [run(ops), run(ops), run(ops)]
  if (sink === 0) throw new Error('unreachable')
  return samples.sort((a, b) => a - b)[1]
}

// The same answers before timing.
for (let v = 0; v < 256; v++) {
  for (const dims of [1, 2, 8]) {
    const a = JSON.stringify(decideFairShare(inputs(dims, v)))
    const b = JSON.stringify(baselineDecide(inputs(dims, v)))
    if (a !== b) throw new Error(`decideFairShare(${dims} dims, ${v}): engine ${a} ≠ baseline ${b}`)
  }
}

console.log('\ndecideFairShare, ns per call (median of 3 runs over 256 distinct inputs)\n')
console.log('| dimensions | plain JS rule | engine (packed crossing) | engine vs JS | checked entry (every call before) |')
console.log('|---|---|---|---|---|')
for (const dims of [1, 2, 8]) {
  const js = nsPerCall(baselineDecide, dims)
  const engine = nsPerCall(decideFairShare, dims)
  const checked = nsPerCall(native.decideFairShare, dims, Math.ceil(OPS / 100))
  console.log(`| ${dims} | ${js.toFixed(0)} | ${engine.toFixed(0)} | ${(js / engine).toFixed(2)}× | ${checked.toFixed(0)} |`)
}
