// Benchmark: selectQuotaShareTarget (each selection followed by its decrementInflight) at
// N = 2, 8, 64 and 512 targets: the native engine against the old engine (the host's
// TypeScript modules' steps, bench/baseline/oldEngineScheduler.js) and against the same rules
// written lean in JavaScript (bench/baseline/quotaShareStrategy.js). Prints a markdown table.
//
//   node scripts/build-native.js   # a RELEASE build first (npm run bench:scheduler does both)
//   node bench/scheduler.mjs [--quick]
//
// Every side sees the same scenario, shaped as the host calls it (its combo ordering step):
// every selection gets a targets array and a concurrency-cap Map of its own (the host builds
// both per request), here 64 prebuilt sets of fresh objects used in turn; targets on distinct
// connections with weights 1..3, a cap over half of them, one target saturated (N >= 8), the
// clock moving 1 ms per selection. A fourth row runs the glue with its native calls stubbed
// (see shellAlone). Rounds alternate the order of the sides; the table shows the
// median round. p50/p99 come from timing single calls with process.hrtime.bigint(), which
// adds its own ~50 ns to each.
import { createRequire } from 'node:module'
import os from 'node:os'

const require = createRequire(import.meta.url)
const native = require('../index.js')
const baseline = require('./baseline/quotaShareStrategy.js')
const oldEngine = require('./baseline/oldEngineScheduler.js')

/**
 * The glue of lib/quotaShareStrategy.js with its two native calls replaced by stubs (the
 * order as given, a release that does nothing): what reading the host's objects costs
 * before anything crosses, the floor of any crossing that reads them per selection.
 */
function shellAlone() {
  const glue = require.resolve('../lib/quotaShareStrategy.js')
  const binding = require('../lib/native.js')
  const saved = { select: binding.__quotaShareSelect, release: binding.__quotaShareRelease, module: require.cache[glue] }
  binding.__quotaShareSelect = (_combo, _model, _now, count, buffer) => {
    for (let i = 0; i < count; i++) buffer[count * binding.QUOTA_SHARE_SELECT_STRIDE + i] = i
    return count
  }
  binding.__quotaShareRelease = () => {}
  delete require.cache[glue]
  try {
    return require(glue).selectQuotaShareTarget
  } finally {
    binding.__quotaShareSelect = saved.select
    binding.__quotaShareRelease = saved.release
    require.cache[glue] = saved.module
  }
}

const quick = process.argv.includes('--quick')
const SIZES = [2, 8, 64, 512]
const ROUNDS = quick ? 3 : 7
const ROUND_MS = quick ? 100 : 300
const SAMPLES = quick ? 5_000 : 30_000
const T0 = 1_700_000_000_000
const COMBO = 'auto-pool:claude-team'
const MODEL = 'claude/claude-opus-4'

const sides = {
  old: {
    name: 'old engine',
    select: oldEngine.selectQuotaShareTarget,
    recordUsage: oldEngine.recordUsage,
    reset: oldEngine._clearForBench,
  },
  js: {
    name: 'lean JavaScript',
    select: baseline.selectQuotaShareTarget,
    recordUsage: baseline.recordUsage,
    reset: baseline._clearForBench,
  },
  native: {
    name: 'native',
    select: native.selectQuotaShareTarget,
    recordUsage: native.recordUsage,
    reset: resetNative,
  },
  shell: {
    name: 'its glue alone',
    select: shellAlone(),
    recordUsage: () => {},
    reset: () => {},
  },
}
/** The timed sides, in the table's order. */
const TIMED = ['old', 'js', 'native', 'shell']
/** How many (targets, caps) sets a scenario cycles through. */
const SETS = 64

function resetNative() {
  native._clearDrrStateForTest()
  native._clearInflightForTest()
  native._clearBucketsForTest()
}

function scenario(n, side) {
  side.reset()
  const makeTargets = () =>
    Array.from({ length: n }, (_, i) => ({
      executionKey: `${COMBO}#${i}:${MODEL}@conn-${i}`,
      connectionId: `conn-${i}`,
      weight: 1 + (i % 3),
      modelStr: MODEL,
      provider: 'claude',
      index: i,
    }))
  const sets = Array.from({ length: SETS }, () => {
    const targets = makeTargets()
    const caps = new Map(targets.filter((_, i) => i % 2 === 0).map((t) => [t.connectionId, 4]))
    return { targets, options: { maxConcurrentByConnection: caps } }
  })
  if (n >= 8) side.recordUsage(`conn-${n - 1}`, '5h', 100, null, T0)
  return sets
}

/** Runs selections for about `ms` milliseconds; returns ops/s. */
function throughput(side, sets, clock, ms) {
  const select = side.select
  let ops = 0
  const start = process.hrtime.bigint()
  const deadline = start + BigInt(ms) * 1_000_000n
  let now = process.hrtime.bigint()
  while (now < deadline) {
    for (let i = 0; i < 256; i++) {
      const { targets, options } = sets[i % SETS]
      const result = select(targets, COMBO, MODEL, clock.now++, options)
      result.decrementInflight()
    }
    ops += 256
    now = process.hrtime.bigint()
  }
  return ops / (Number(now - start) / 1e9)
}

/** Times `count` single calls; returns [p50, p99] in ns. */
function latencies(side, sets, clock, count) {
  const select = side.select
  const samples = new Float64Array(count)
  for (let i = 0; i < count; i++) {
    const { targets, options } = sets[i % SETS]
    const start = process.hrtime.bigint()
    const result = select(targets, COMBO, MODEL, clock.now++, options)
    result.decrementInflight()
    samples[i] = Number(process.hrtime.bigint() - start)
  }
  samples.sort()
  return [samples[Math.floor(count * 0.5)], samples[Math.floor(count * 0.99)]]
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]

function checkSameChoices(n) {
  // Every side must make the same choices as the engine, or the comparison is meaningless.
  const keys = ['old', 'js', 'native']
  const sets = Object.fromEntries(keys.map((key) => [key, scenario(n, sides[key])]))
  for (let i = 0; i < 2000; i++) {
    const results = keys.map((key) => {
      const { targets, options } = sets[key][i % SETS]
      return sides[key].select(targets, COMBO, MODEL, T0 + i, options)
    })
    const orders = results.map((r) => r.orderedTargets.map((t) => t.index).join(','))
    for (let k = 0; k < keys.length - 1; k++) {
      if (orders[k] !== orders[keys.length - 1]) throw new Error(`N=${n}, selection ${i}: ${sides[keys[k]].name} chose ${orders[k]}, native ${orders[keys.length - 1]}`)
    }
    if (i % 3 !== 0) for (const r of results) r.decrementInflight()
  }
}

function fmtOps(ops) {
  return ops >= 1e6 ? `${(ops / 1e6).toFixed(2)} M` : `${(ops / 1e3).toFixed(0)} k`
}
function fmtNs(ns) {
  return ns >= 1e4 ? `${(ns / 1e3).toFixed(1)} µs` : `${(ns / 1e3).toFixed(2)} µs`
}

const rows = []
for (const n of SIZES) {
  checkSameChoices(n)
  const results = {}
  const setups = {}
  const clocks = {}
  for (const key of TIMED) {
    results[key] = { ops: [], p50: [], p99: [] }
    clocks[key] = { now: T0 }
  }
  for (const key of TIMED) {
    setups[key] = scenario(n, sides[key])
    throughput(sides[key], setups[key], clocks[key], ROUND_MS) // warm-up
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const key of round % 2 === 0 ? TIMED : [...TIMED].reverse()) {
      results[key].ops.push(throughput(sides[key], setups[key], clocks[key], ROUND_MS))
      const [p50, p99] = latencies(sides[key], setups[key], clocks[key], Math.floor(SAMPLES / ROUNDS))
      results[key].p50.push(p50)
      results[key].p99.push(p99)
    }
  }
  const summary = (key) => ({ ops: median(results[key].ops), p50: median(results[key].p50), p99: median(results[key].p99) })
  rows.push({ n, ...Object.fromEntries(TIMED.map((key) => [key, summary(key)])) })
}

console.log(`selectQuotaShareTarget + decrementInflight — Node ${process.version}, ${os.cpus()[0]?.model ?? os.arch()}, ${os.cpus().length} CPUs`)
console.log('')
console.log('| N | | ops/s | p50 | p99 | time ÷ old engine | time ÷ lean JavaScript |')
console.log('|---:|---|---:|---:|---:|---:|---:|')
for (const row of rows) {
  for (const key of TIMED) {
    const r = row[key]
    const ratio = (base) => (key === base ? '' : `${(row[base].ops / r.ops).toFixed(2)}×`)
    console.log(`| ${key === 'old' ? row.n : ''} | ${sides[key].name} | ${fmtOps(r.ops)} | ${fmtNs(r.p50)} | ${fmtNs(r.p99)} | ${ratio('old')} | ${ratio('js')} |`)
  }
}
