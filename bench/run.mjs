// npm run bench — the engine against a straightforward better-sqlite3 baseline
// (bench/baseline/store.mjs), each on its own temporary SQLite file.
//
//   node bench/run.mjs [--ops N] [--max-ms MS]
//
// Store operations (consume, peek, poolConsumedTotal) at pools of 10 / 1 000 / 10 000 keys
// (consume also in alternating rounds with the baseline, for a ratio the machine's drift
// moves less),
// then the hot path (enforceQuotaShare, recordConsumption) for 8 keys × 2 dimensions,
// serial and 64 concurrent (Promise.all batches of 64), then the crossing options of the
// hot path side by side (JS thread vs a worker thread; buffered vs per-call commits), then
// the host's real path and its HTTP variant (bench/real-path.mjs). Each row: warm-up, then up to N
// ops or MS milliseconds, whichever comes first; latency per op from process.hrtime.bigint
// (for the concurrent rows: from the batch's start to the op's resolution).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { measurer } from './measure.mjs'
import { openBaseline } from './baseline/store.mjs'
import { startHost } from './host.mjs'

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}
const MAX_OPS = arg('--ops', 20_000)
const MAX_MS = arg('--max-ms', 1_000)
const WARMUP = Math.min(1_000, MAX_OPS)
const CONCURRENCY = 64

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'quota-bench-'))
const engineDir = path.join(tmp, 'engine')
fs.mkdirSync(engineDir)
// The host fixture (bench/host.mjs): the host's connection, pragmas and schema first, the
// engine installed with the host's path function.
const host = startHost({ dir: engineDir })

const require = createRequire(import.meta.url)
const engine = require('@omniroute/quota-engine')
const native = require('../binding.js')
const { StoreDriver } = require('../lib/stores.js') // only to seed counters at a chosen time
const sqliteDriver = new StoreDriver()
const baseline = openBaseline(path.join(tmp, 'baseline.sqlite'))
const store = engine.getSqliteQuotaStore()

const HOUR = 3_600_000
const { serial: measureSerial, concurrent: measureConcurrent } = measurer({ maxOps: MAX_OPS, maxMs: MAX_MS, warmup: WARMUP, concurrency: CONCURRENCY })

const rows = []
const crossings = []
// consume's row drifts with the machine (one side runs after the other, and a flush or a
// checkpoint lands in one or the other): it is also measured in alternating rounds.
const ROUNDS = 8
const roundMeasure = measurer({ maxOps: Math.ceil(MAX_OPS / 4), maxMs: MAX_MS / 4, warmup: 200, concurrency: CONCURRENCY }).serial
const interleaved = []
const commitBuffered = () => {
  const error = engine.flushQuotaWrites()
  if (error) throw new Error(`commit of the buffered consumes failed: ${error}`)
}
// `engineFinish`: the engine's deferred work for the calls of the window (its buffered
// commit), done inside the window, as the baseline commits inside each call.
async function compare(operation, size, engineFn, baselineFn, mode = 'serial', engineFinish = undefined) {
  const measure = mode === 'serial' ? measureSerial : measureConcurrent
  const e = await measure(engineFn, engineFinish)
  const b = await measure(baselineFn)
  rows.push({ operation, size, e, b })
  process.stderr.write(`  ${operation} (${size}) done\n`)
}

// Quick sanity check that both sides compute the same thing before timing them. The two
// reads happen a few milliseconds apart on the real clock, and the previous bucket decays in
// between, so allow for a little of that.
function assertClose(what, a, b) {
  if (Math.abs(a - b) > 1e-4 * Math.max(1, Math.abs(a))) throw new Error(`${what}: engine ${a} ≠ baseline ${b}`)
}

try {
  const started = Date.now()

  // --- store operations at three pool sizes -------------------------------------------------
  for (const size of [10, 1_000, 10_000]) {
    const dim = { poolId: `bench-pool-${size}`, unit: 'requests', window: 'hourly' }
    const keys = Array.from({ length: size }, (_, i) => `key-${size}-${i}`)
    // Every key has a previous and a current bucket.
    const now = Date.now()
    const seed = []
    for (const k of keys) {
      seed.push([k, dim, Math.floor((now - HOUR) / HOUR), 5, now - HOUR])
      seed.push([k, dim, Math.floor(now / HOUR), 3, now])
    }
    for (const [k, , , cost, t] of seed) sqliteDriver.consume(k, dim, cost, t)
    baseline.setup.seed(seed)
    assertClose(`poolConsumedTotal(${size})`, await store.poolConsumedTotal(dim.poolId, dim), await baseline.store.poolConsumedTotal(dim.poolId, dim))

    const pick = (i) => keys[(i * 7919) % size]
    await compare('consume', size, (i) => store.consume(pick(i), dim, 1), (i) => baseline.store.consume(pick(i), dim, 1), 'serial', commitBuffered)
    const rounds = { size, e: [], b: [] }
    for (let r = 0; r < ROUNDS; r++) {
      // Who goes first alternates too.
      const sides = [
        // The engine's consume commits by time (lib/writeBuffer.js): each round commits its
        // own calls inside its window, or a round shorter than QUOTA_RECORD_FLUSH_MS, or the
        // tail of any round, would be committed in the next one's untimed warm-up.
        async () => rounds.e.push((await roundMeasure((i) => store.consume(pick(i), dim, 1), commitBuffered)).opsPerSec),
        async () => rounds.b.push((await roundMeasure((i) => baseline.store.consume(pick(i), dim, 1))).opsPerSec),
      ]
      for (const side of r % 2 === 0 ? sides : sides.reverse()) await side()
    }
    interleaved.push(rounds)
    await compare('peek', size, (i) => store.peek(pick(i), dim), (i) => baseline.store.peek(pick(i), dim))
    await compare(
      'poolConsumedTotal',
      size,
      () => store.poolConsumedTotal(dim.poolId, dim),
      () => baseline.store.poolConsumedTotal(dim.poolId, dim),
    )
  }

  // --- the hot path: 8 keys × 2 dimensions ----------------------------------------------------
  // Limits high enough that every request is allowed (the common case) for the whole run.
  const connectionId = 'bench-conn'
  const provider = 'bench-provider' // no saturation fetcher: generous mode, no fetch round
  const dimensions = [
    { unit: 'requests', window: 'hourly', limit: 1e9 },
    { unit: 'tokens', window: 'hourly', limit: 1e12 },
  ]
  const hotKeys = Array.from({ length: 8 }, (_, i) => `hot-key-${i}`)
  const allocations = hotKeys.map((apiKeyId) => ({ apiKeyId, weight: 12.5, policy: 'hard' }))
  engine.upsertProviderPlan({ connectionId, provider, dimensions, source: 'manual' })
  const pool = engine.createPool({ connectionId, name: 'bench hot path', allocations })
  baseline.setup.upsertProviderPlan({ connectionId, provider, dimensions })
  baseline.setup.createPool({ id: pool.id, connectionId, name: 'bench hot path', allocations })

  const req = (i) => ({ apiKeyId: hotKeys[i % 8], connectionId, provider })
  const rec = (i) => ({ ...req(i), cost: { tokens: 1200, usd: 0.002, requests: 1 } })
  for (const [e, b] of [[await engine.enforceQuotaShare(req(0)), await baseline.enforceQuotaShare(req(0))]]) {
    if (e.kind !== 'allow' || b.kind !== 'allow') throw new Error(`hot path setup: ${JSON.stringify({ e, b })}`)
  }
  for (const mode of ['serial', `${CONCURRENCY} concurrent`]) {
    const m = mode === 'serial' ? 'serial' : 'concurrent'
    await compare(`enforceQuotaShare, ${mode}`, '8 keys × 2 dims', (i) => engine.enforceQuotaShare(req(i)), (i) => baseline.enforceQuotaShare(req(i)), m)
    await compare(`recordConsumption, ${mode}`, '8 keys × 2 dims', (i) => engine.recordConsumption(rec(i)), (i) => baseline.recordConsumption(rec(i)), m, commitBuffered)
  }
  // --- how the hot path crosses: the options #4 asked to measure -------------------------
  // The same enforce decision made on the JS thread (what the engine does: a synchronous
  // call, a settled promise) and on the addon's tokio worker thread (a hop each way); the
  // same record buffered (the engine's default) and committed in its own call.
  if ((await native.__enforceOnWorkerForBench(hotKeys[0], connectionId, provider, 0.5)) !== 'allow') {
    throw new Error('the worker-thread enforce does not decide like the engine')
  }
  const baselineOf = (operation) => rows.find((r) => r.operation === operation).b.opsPerSec
  for (const mode of ['serial', `${CONCURRENCY} concurrent`]) {
    const m = mode === 'serial' ? 'serial' : 'concurrent'
    const measure = m === 'serial' ? measureSerial : measureConcurrent
    const option = async (name, call, fn, finish) => {
      crossings.push({ name, mode, r: await measure(fn, finish), baseline: baselineOf(`${call}, ${mode}`) })
      process.stderr.write(`  ${name} (${mode}) done\n`)
    }
    await option('enforce on the JS thread, settled promise (the engine)', 'enforceQuotaShare', (i) => engine.enforceQuotaShare(req(i)))
    await option('enforce on a tokio worker thread', 'enforceQuotaShare', (i) =>
      native.__enforceOnWorkerForBench(hotKeys[i % 8], connectionId, provider, 0.5),
    )
    await option('record buffered, committed together every 10 ms (the engine)', 'recordConsumption', (i) => engine.recordConsumption(rec(i)), commitBuffered)
    process.env.QUOTA_RECORD_FLUSH_MS = '0'
    try {
      await option('record committed in its own call (QUOTA_RECORD_FLUSH_MS=0)', 'recordConsumption', (i) => engine.recordConsumption(rec(i)))
    } finally {
      delete process.env.QUOTA_RECORD_FLUSH_MS
    }
  }

  // Both sides recorded their own runs; the per-key counters must still agree in kind.
  const dimReq = { poolId: pool.id, unit: 'requests', window: 'hourly' }
  const eTotal = await store.poolConsumedTotal(pool.id, dimReq)
  const bTotal = await baseline.store.poolConsumedTotal(pool.id, dimReq)
  if (!(eTotal > 0 && bTotal > 0)) throw new Error(`hot path recorded nothing: engine ${eTotal}, baseline ${bTotal}`)

  // --- the table ------------------------------------------------------------------------------
  const f0 = (n) => Math.round(n).toLocaleString('en-US')
  const f1 = (n) => (n >= 100 ? n.toFixed(0) : n.toFixed(1))
  console.log(
    `\nquota-engine bench — ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'}, ` +
      `up to ${MAX_OPS} ops or ${MAX_MS} ms per cell after ${WARMUP} warm-up ops\n`,
  )
  console.log('| operation | size | engine ops/s | engine p50 µs | engine p99 µs | baseline ops/s | baseline p50 µs | baseline p99 µs | speed-up |')
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const { operation, size, e, b } of rows) {
    const sizeLabel = typeof size === 'number' ? `${f0(size)} keys` : size
    console.log(
      `| ${operation} | ${sizeLabel} | ${f0(e.opsPerSec)} | ${f1(e.p50)} | ${f1(e.p99)} | ${f0(b.opsPerSec)} | ${f1(b.p50)} | ${f1(b.p99)} | ${(e.opsPerSec / b.opsPerSec).toFixed(2)}× |`,
    )
  }
  const median = (xs) => {
    const sorted = [...xs].sort((a, b) => a - b)
    const mid = sorted.length >> 1
    return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
  }
  console.log(
    `\nconsume in ${ROUNDS} alternating rounds (up to ${f0(Math.ceil(MAX_OPS / 4))} calls or ${MAX_MS / 4} ms each, engine and baseline in turn, who goes first alternating, the engine's buffered commits inside its own round; ops/s):\n`,
  )
  console.log('| size | engine, median | baseline, median | speed-up, median of the rounds | lowest – highest | rounds at ≥ 10× |')
  console.log('|---:|---:|---:|---:|---:|---:|')
  for (const { size, e, b } of interleaved) {
    const ratios = e.map((x, i) => x / b[i])
    console.log(
      `| ${f0(size)} keys | ${f0(median(e))} | ${f0(median(b))} | ${median(ratios).toFixed(2)}× | ${Math.min(...ratios).toFixed(2)}× – ${Math.max(...ratios).toFixed(2)}× | ${ratios.filter((x) => x >= 10).length} of ${ratios.length} |`,
    )
  }
  console.log('\nHow the hot path crosses (same 8 keys × 2 dims; "vs baseline" against the baseline row of the same call and mode):\n')
  console.log('| option | mode | ops/s | p50 µs | p99 µs | vs baseline |')
  console.log('|---|---|---:|---:|---:|---:|')
  for (const { name, mode, r, baseline: b } of crossings) {
    console.log(`| ${name} | ${mode} | ${f0(r.opsPerSec)} | ${f1(r.p50)} | ${f1(r.p99)} | ${(r.opsPerSec / b).toFixed(2)}× |`)
  }
  console.log(`\n(speed-up = engine ops/s ÷ baseline ops/s; total ${((Date.now() - started) / 1000).toFixed(1)} s)`)
} finally {
  engine.closeQuotaDb()
  host.stop()
  baseline.close()
  fs.rmSync(tmp, { recursive: true, force: true })
}

// --- the host's real path and the HTTP variant, in a process of their own ---------------------
// Then every way the host may install and call the engine (bench/host-options.mjs).
for (const script of ['./real-path.mjs', './host-options.mjs']) {
  const child = spawnSync(process.execPath, [fileURLToPath(new URL(script, import.meta.url))], { stdio: 'inherit', env: process.env })
  if (child.status !== 0) process.exitCode = child.status ?? 1
}
