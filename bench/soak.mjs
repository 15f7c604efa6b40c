// Soak: mixed enforce / record / select load on a temp SQLite file for a while, sampling the
// process's RSS, V8 heap and open file descriptors; prints a table and a verdict (flat =
// every sample after the warm-up within a tolerance of the first one after it).
//
//   node --expose-gc bench/soak.mjs [seconds=600] [sampleSeconds=10]
//   SOAK_SECONDS=60 SOAK_SAMPLE_SECONDS=5 node --expose-gc bench/soak.mjs
//
// Not part of `npm test`. Build the addon first (`node scripts/build-native.js` for the
// release build the figures are meant for). Exit code 1 when the verdict is "not flat".
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const engine = require('../index.js')

const seconds = Number(process.argv[2] ?? process.env.SOAK_SECONDS ?? 600)
const sampleSeconds = Number(process.argv[3] ?? process.env.SOAK_SAMPLE_SECONDS ?? 10)
if (!(seconds > 0 && sampleSeconds > 0)) throw new Error('usage: soak.mjs [seconds] [sampleSeconds]')

// Tolerances of the verdict, after the warm-up (the first 20 % of the run, at least 2 samples).
const RSS_TOLERANCE = 0.1
const HEAP_TOLERANCE = 0.25
const FD_TOLERANCE = 2

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-soak-'))
const dbPath = path.join(dir, 'storage.sqlite')
let warnings = 0
engine.installHost({
  dbPath,
  logger: { warn: () => warnings++, info() {}, debug() {} },
  // Async host fetchers, as in production: exercised on every saturation cache miss (30 s).
  saturationFetchers: { '*': async () => Math.random() },
})

// 20 pools of 5 keys on one connection each; a plan with a request and a token dimension;
// a model cap on one key per pool.
const POOLS = 20
const KEYS = 5
const requests = []
for (let p = 0; p < POOLS; p++) {
  const connectionId = `soak-conn-${p}`
  const provider = `soak-provider-${p % 4}`
  const allocations = Array.from({ length: KEYS }, (_, k) => ({
    apiKeyId: `soak-key-${p}-${k}`,
    weight: 20,
    policy: ['hard', 'soft', 'burst'][k % 3],
  }))
  const pool = engine.createPool({ connectionId, name: `soak ${p}`, allocations })
  engine.upsertProviderPlan({
    connectionId,
    provider,
    dimensions: [
      { unit: 'requests', window: 'hourly', limit: 1e9 },
      { unit: 'tokens', window: 'daily', limit: 1e12 },
    ],
    source: 'manual',
  })
  engine.setModelCap({ poolId: pool.id, apiKeyId: allocations[0].apiKeyId, model: 'soak-model', capValue: 1e9, capUnit: 'requests' })
  for (const a of allocations) requests.push({ apiKeyId: a.apiKeyId, connectionId, provider, model: 'soak-model' })
}
const targets = Array.from({ length: 6 }, (_, i) => ({
  executionKey: `soak-target-${i}`,
  connectionId: `soak-conn-${i}`,
  weight: 1 + (i % 3),
  modelStr: 'soak/soak-model',
}))
const select = typeof engine.selectQuotaShareTarget === 'function' ? engine.selectQuotaShareTarget : null

const counts = { enforce: 0, record: 0, select: 0, block: 0 }
let stop = false
let i = 0

async function loadLoop() {
  while (!stop) {
    // A batch, then yield to the event loop (timers, the sampler, fetcher promises).
    for (let n = 0; n < 200; n++) {
      const request = requests[i++ % requests.length]
      const roll = i % 10
      if (roll < 4) {
        const decision = await engine.enforceQuotaShare(request)
        counts.enforce++
        if (decision.kind === 'block') counts.block++
      } else if (roll < 8 || !select) {
        await engine.recordConsumption({ ...request, cost: { tokens: 100 + (i % 900), usd: 0.001, requests: 1 } })
        counts.record++
      } else {
        const picked = select(targets, `soak-combo-${i % 8}`, 'soak/soak-model')
        picked.decrementInflight()
        counts.select++
      }
    }
    await new Promise((resolve) => setImmediate(resolve))
  }
}

function openFds() {
  try {
    return fs.readdirSync('/proc/self/fd').length
  } catch {
    return NaN // not Linux
  }
}

const samples = []
const started = Date.now()
function sample() {
  if (global.gc) global.gc()
  const memory = process.memoryUsage()
  const ops = counts.enforce + counts.record + counts.select
  const previous = samples.at(-1)
  const t = (Date.now() - started) / 1000
  samples.push({
    t,
    ops,
    rate: previous ? (ops - previous.ops) / (t - previous.t) : 0,
    rss: memory.rss / 2 ** 20,
    heap: memory.heapUsed / 2 ** 20,
    external: memory.external / 2 ** 20,
    fds: openFds(),
  })
}

const mb = (v) => v.toFixed(1)
function report() {
  console.log(`soak: ${seconds} s, sample every ${sampleSeconds} s, ${POOLS} pools x ${KEYS} keys, select ${select ? 'on' : 'skipped (no selectQuotaShareTarget)'}, gc ${global.gc ? 'forced before each sample' : 'not exposed (run with --expose-gc)'}`)
  console.log('')
  console.log('| t (s) | ops | ops/s | RSS (MiB) | heap used (MiB) | external (MiB) | open fds |')
  console.log('|---:|---:|---:|---:|---:|---:|---:|')
  for (const s of samples) {
    console.log(`| ${s.t.toFixed(0)} | ${s.ops} | ${s.rate.toFixed(0)} | ${mb(s.rss)} | ${mb(s.heap)} | ${mb(s.external)} | ${s.fds} |`)
  }
  const warm = Math.max(2, Math.ceil(samples.length * 0.2))
  const steady = samples.slice(warm)
  console.log('')
  console.log(`ops: ${counts.enforce} enforce (${counts.block} blocked), ${counts.record} record, ${counts.select} select; warnings logged: ${warnings}`)
  if (steady.length < 2) {
    console.log('verdict: too short to judge (need at least 2 samples after the warm-up)')
    return true
  }
  const base = steady[0]
  const spread = (key) => Math.max(...steady.map((s) => Math.abs(s[key] - base[key])))
  const checks = [
    ['RSS', spread('rss') / base.rss, RSS_TOLERANCE, `${mb(base.rss)} MiB, max drift ${mb(spread('rss'))} MiB`],
    ['heap', spread('heap') / base.heap, HEAP_TOLERANCE, `${mb(base.heap)} MiB, max drift ${mb(spread('heap'))} MiB`],
  ]
  const fdDrift = spread('fds')
  let flat = true
  for (const [name, drift, tolerance, detail] of checks) {
    const ok = drift <= tolerance
    flat &&= ok
    console.log(`${name}: ${ok ? 'flat' : 'NOT flat'} (${detail} = ${(drift * 100).toFixed(1)} %, tolerance ${tolerance * 100} %)`)
  }
  const fdsOk = Number.isNaN(fdDrift) || fdDrift <= FD_TOLERANCE
  flat &&= fdsOk
  console.log(`open fds: ${fdsOk ? 'flat' : 'NOT flat'} (${base.fds}, max drift ${fdDrift}, tolerance ${FD_TOLERANCE})`)
  console.log(`warnings: ${warnings === 0 ? 'none' : warnings}`)
  flat &&= warnings === 0
  console.log(`verdict: ${flat ? 'FLAT' : 'NOT FLAT'} after a ${samples[warm].t.toFixed(0)} s warm-up`)
  return flat
}

sample()
const timer = setInterval(sample, sampleSeconds * 1000)
const load = loadLoop()
await new Promise((resolve) => setTimeout(resolve, seconds * 1000))
stop = true
clearInterval(timer)
await load
sample()
const flat = report()
engine.closeQuotaDb()
fs.rmSync(dir, { recursive: true, force: true })
process.exitCode = flat ? 0 : 1
