// The host's real path (run by `npm run bench`; alone: `node scripts/with-hooks.js
// bench/real-path.mjs [--requests N] [--share-rounds R] [--http-seconds S] [--http-rounds R]`).
//
// On the host fixture (bench/host.mjs): installHost({ dbPath: () => file, … }), the host's
// pragmas and schema first, its call-log row per request, a checkpoint now and then.
// 1. Per request, as OmniRoute's request handler does it: `enforceQuotaShare` → the host
//    commits one unrelated row to its own table (a call log) on its own better-sqlite3
//    connection to the SAME storage.sqlite → `recordConsumption`, through the `compat/*`
//    entries the host imports; one request per event-loop turn (setImmediate between
//    requests); 8 keys × 2 dimensions. p50/p99 per request for: no quota (the host's insert
//    alone), the engine, and the JS baseline (bench/baseline: the old engine's way, on the
//    host's connection). The engine's share = its p50 − the no-quota p50, the two measured in
//    alternating rounds (5 by default), the round of the median share shown; beside it, the
//    time inside the quota calls themselves, timed around each. Also the record commits per
//    second (group commit by time: docs/sqlite.md), and `SqliteQuotaStore.consume` on the
//    same path: the host's insert, then a consume per dimension of the key.
// 2. End to end over HTTP: a minimal node:http server (a child process) doing enforce →
//    a simulated upstream (setImmediate) → record → the host's insert, driven by
//    autocannon; req/s and latency with quota off and on, in rounds of off then on (5 by
//    default): the median round, and the spread of the rounds' ratios.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { medianRound, summarize } from './measure.mjs'
import { openBaseline } from './baseline/store.mjs'
import { startHost } from './host.mjs'

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name)
  return i > 0 ? process.argv[i + 1] : fallback
}
const require = createRequire(import.meta.url)
const CALL_LOG = `CREATE TABLE IF NOT EXISTS call_logs (id TEXT PRIMARY KEY, timestamp TEXT NOT NULL, model TEXT, provider TEXT, connection_id TEXT, api_key_id TEXT, request_summary TEXT, correlation_id TEXT)`
const SUMMARY = JSON.stringify({ messages: 3, stream: false, finish: 'stop' })
/** The `dbPath` form: the host's function, or `--db-path string` for the comparison row. */
const DB_PATH = arg('--db-path', 'function')
/** HTTP rounds (off then on each): `--http-rounds R`; 0 skips the HTTP variant. */
const HTTP_ROUNDS = Number(arg('--http-rounds', 5))
/** Rounds of no quota then the engine, `--requests` split among them: `--share-rounds R`. */
const SHARE_ROUNDS = Math.max(1, Number(arg('--share-rounds', 5)))

const connectionId = 'real-conn'
const provider = 'real-provider' // no saturation fetcher: no fetch round
const dimensions = [
  { unit: 'requests', window: 'hourly', limit: 1e9 },
  { unit: 'tokens', window: 'hourly', limit: 1e12 },
]
const keys = Array.from({ length: 8 }, (_, i) => `real-key-${i}`)
const allocations = keys.map((apiKeyId) => ({ apiKeyId, weight: 12.5, policy: 'hard' }))
const req = (i) => ({ apiKeyId: keys[i % 8], connectionId, provider })
// Built as a literal, as the host's handler builds it: a spread (`{ ...req(i), … }`) costs V8
// about 1 µs more per call here, which would be counted as the engine's.
const rec = (i) => ({ apiKeyId: keys[i % 8], connectionId, provider, model: 'gpt-x', cost: { tokens: 1200, usd: 0.002, requests: 1 } })

/** The engine's pool and plan (setup, not timed). */
export function setupEngine() {
  const engine = require('@omniroute/quota-engine')
  engine.upsertProviderPlan({ connectionId, provider, dimensions, source: 'manual' })
  return engine.createPool({ connectionId, name: 'real path', allocations })
}

const WARMUP_REQUESTS = 1000

/** One request per turn, `n` of them after a warm-up; latency per request in µs. */
async function perTurn(n, request) {
  const turn = () => new Promise((resolve) => setImmediate(resolve))
  for (let i = 0; i < WARMUP_REQUESTS; i++) {
    await request(i)
    await turn()
  }
  const lat = new Float64Array(n)
  const start = process.hrtime.bigint()
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint()
    await request(i)
    lat[i] = Number(process.hrtime.bigint() - t0)
    await turn()
  }
  const total = process.hrtime.bigint() - start
  return { ...summarize(lat, n, total), seconds: Number(total) / 1e9 }
}

/**
 * The time each request spends inside the quota calls themselves, beside the whole request's
 * latency that perTurn measures: `timed(call)` around each quota call, `next()` at the end of
 * each request (the first WARMUP_REQUESTS are perTurn's warm-up). Two clock reads per call
 * (~0.1 µs) are counted in.
 */
function insideCalls(n) {
  const perRequest = new Float64Array(WARMUP_REQUESTS + n)
  let request = 0
  return {
    async timed(call) {
      const t0 = process.hrtime.bigint()
      const value = await call()
      perRequest[request] += Number(process.hrtime.bigint() - t0)
      return value
    },
    next() {
      request++
    },
    summary: () => summarize(perRequest.subarray(WARMUP_REQUESTS), n, 1n),
  }
}

async function realPath(n) {
  const fixture = startHost({ dbPath: DB_PATH })
  const tmp = fixture.dir
  const { enforceQuotaShare, recordConsumption } = require('@omniroute/quota-engine/compat/enforce')
  const engine = require('@omniroute/quota-engine')
  try {
    const pool = setupEngine()
    const host = fixture.db
    const hostWrite = (i) => fixture.logCall(keys[i % 8], connectionId, provider)
    if ((await enforceQuotaShare(req(0))).kind !== 'allow') throw new Error('real path: the engine does not allow')

    // (NaN on a build without the counter: the bench also runs against older builds.)
    const commits = () => Number(/^quota_engine_record_commits_total (\d+)$/m.exec(engine.metrics())?.[1])
    // No quota and the engine in alternating rounds, so both see the same machine and the
    // same growing files; the rows are the round of the median share.
    let recorded = 0
    const rounds = []
    const perRound = Math.floor(n / SHARE_ROUNDS)
    for (let round = 0; round < SHARE_ROUNDS; round++) {
      const noQuota = await perTurn(perRound, async (i) => { hostWrite(i) })
      const before = commits()
      const engineCalls = insideCalls(perRound)
      const withEngine = await perTurn(perRound, async (i) => {
        const decision = await engineCalls.timed(() => enforceQuotaShare(req(i)))
        if (decision.kind !== 'allow') throw new Error('blocked')
        hostWrite(i)
        await engineCalls.timed(() => recordConsumption(rec(i)))
        recorded++
        engineCalls.next()
      })
      const commitsPerSec = (commits() - before) / withEngine.seconds
      rounds.push({ noQuota, withEngine, inside: engineCalls.summary(), commitsPerSec, share: withEngine.p50 - noQuota.p50 })
    }
    const shares = medianRound(rounds, 'share')
    const { noQuota, withEngine, commitsPerSec } = shares.median
    // The same without the host's insert: what a commit by anyone costs the next decision.
    const quietHost = await perTurn(n, async (i) => {
      const decision = await enforceQuotaShare(req(i))
      if (decision.kind !== 'allow') throw new Error('blocked')
      await recordConsumption(rec(i))
      recorded++
    })
    // SqliteQuotaStore.consume on the same path: the host's insert, then one consume per
    // dimension of the key.
    const { getSqliteQuotaStore } = require('@omniroute/quota-engine/compat/sqliteQuotaStore')
    const store = getSqliteQuotaStore()
    const dims = dimensions.map(({ unit, window }) => ({ poolId: pool.id, unit, window }))
    const consumeCalls = insideCalls(n)
    const consumeOnPath = await perTurn(n, async (i) => {
      hostWrite(i)
      await consumeCalls.timed(() => store.consume(keys[i % 8], dims[0], 1))
      await consumeCalls.timed(() => store.consume(keys[i % 8], dims[1], 1200))
      recorded++
      consumeCalls.next()
    })
    // The counters are exact: every record and consume of the three runs, as the host's own
    // connection reads the table.
    if (engine.flushQuotaWrites() !== null) throw new Error('real path: the buffered records did not commit')
    const total = host.prepare('SELECT sum(consumed) AS s FROM quota_consumption WHERE dimension_key = ?')
    for (const [dimension, each] of [['requests', 1], ['tokens', 1200]]) {
      const counted = total.get(`${pool.id}:${dimension}:hourly`).s
      if (counted !== recorded * each) throw new Error(`real path: ${dimension} counted ${counted}, made ${recorded * each}`)
    }
    fixture.stop()

    // The old engine's way: its statements on the host's own connection (one file).
    const baseline = openBaseline(path.join(tmp, 'baseline.sqlite'))
    baseline.db.exec(CALL_LOG)
    baseline.setup.upsertProviderPlan({ connectionId, provider, dimensions })
    baseline.setup.createPool({ id: pool.id, connectionId, name: 'real path', allocations })
    let bSeq = 0
    const bStatement = baseline.db.prepare("INSERT INTO call_logs (id, timestamp, model, provider, connection_id, api_key_id, request_summary, correlation_id) VALUES (?, ?, 'gpt-x', ?, ?, ?, ?, ?)")
    const bInsert = { run: (i) => bStatement.run(`b-${++bSeq}`, new Date().toISOString(), provider, connectionId, keys[i % 8], SUMMARY, `c-${bSeq}`) }
    const baselineCalls = insideCalls(n)
    const withBaseline = await perTurn(n, async (i) => {
      const decision = await baselineCalls.timed(() => baseline.enforceQuotaShare(req(i)))
      if (decision.kind !== 'allow') throw new Error('baseline blocked')
      bInsert.run(i)
      await baselineCalls.timed(() => baseline.recordConsumption(rec(i)))
      baselineCalls.next()
    })
    const baselineDims = dimensions.map(({ unit, window }) => ({ poolId: pool.id, unit, window }))
    const baselineConsumeCalls = insideCalls(n)
    const consumeBaseline = await perTurn(n, async (i) => {
      bInsert.run(i)
      await baselineConsumeCalls.timed(() => baseline.store.consume(keys[i % 8], baselineDims[0], 1))
      await baselineConsumeCalls.timed(() => baseline.store.consume(keys[i % 8], baselineDims[1], 1200))
      baselineConsumeCalls.next()
    })
    baseline.close()
    const inside = {
      withEngine: shares.median.inside,
      withBaseline: baselineCalls.summary(),
      consumeOnPath: consumeCalls.summary(),
      consumeBaseline: baselineConsumeCalls.summary(),
    }
    return { noQuota, withEngine, shares, quietHost, withBaseline, commitsPerSec, consumeOnPath, consumeBaseline, inside }
  } finally {
    engine.closeQuotaDb()
    fs.rmSync(tmp, { recursive: true, force: true })
  }
}

// --- the HTTP variant ------------------------------------------------------------------------
const here = fileURLToPath(import.meta.url)

/** The server child: argv --serve <quota on|off>; prints its port. */
async function serve(quota) {
  const http = await import('node:http')
  const fixture = startHost({ dbPath: DB_PATH })
  const tmp = fixture.dir
  const { enforceQuotaShare, recordConsumption } = require('@omniroute/quota-engine/compat/enforce')
  setupEngine()
  let i = 0
  const server = http.createServer(async (_request, response) => {
    const n = i++
    if (quota) {
      const decision = await enforceQuotaShare(req(n))
      if (decision.kind !== 'allow') {
        response.writeHead(429).end()
        return
      }
    }
    await new Promise((resolve) => setImmediate(resolve)) // the upstream call
    if (quota) await recordConsumption(rec(n))
    fixture.logCall(keys[n % 8], connectionId, provider)
    response.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}')
  })
  server.listen(0, '127.0.0.1', () => process.stdout.write(`PORT ${server.address().port}\n`))
  // The server's CPU time per request over the timed run (marked by SIGUSR2), said at exit:
  // the whole cost of a request in a server, the engine's timers and GC included.
  let mark = null
  process.on('SIGUSR2', () => (mark = { cpu: process.cpuUsage(), requests: i }))
  process.on('SIGTERM', () => {
    if (mark) {
      const cpu = process.cpuUsage(mark.cpu)
      process.stdout.write(`CPU ${cpu.user + cpu.system} ${i - mark.requests}\n`)
    }
    server.close()
    fixture.stop()
    fs.rmSync(tmp, { recursive: true, force: true })
    process.exit(0)
  })
}

async function httpRun(quota, seconds) {
  const autocannon = require('autocannon')
  const child = spawn(process.execPath, [here, '--serve', quota ? 'on' : 'off', '--db-path', DB_PATH], { stdio: ['ignore', 'pipe', 'inherit'], env: process.env })
  let out = ''
  child.stdout.on('data', (b) => (out += b))
  const exited = new Promise((resolve) => child.on('exit', resolve))
  const port = await Promise.race([
    new Promise((resolve) => {
      const look = () => (/PORT (\d+)/.test(out) ? resolve(Number(/PORT (\d+)/.exec(out)[1])) : setTimeout(look, 5))
      look()
    }),
    exited.then((code) => Promise.reject(new Error(`server exited ${code}`))),
  ])
  try {
    const options = { url: `http://127.0.0.1:${port}/v1/chat/completions`, connections: 32, pipelining: 1 }
    await autocannon({ ...options, duration: 1 }) // warm-up
    child.kill('SIGUSR2')
    const r = await autocannon({ ...options, duration: seconds })
    child.kill('SIGTERM')
    await exited
    const [, cpuUs, requests] = /CPU (\d+) (\d+)/.exec(out) ?? []
    return { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, errors: r.errors, cpuPerRequest: Number(cpuUs) / Number(requests) }
  } finally {
    child.kill('SIGTERM')
  }
}

async function main() {
  const n = Number(arg('--requests', 20_000))
  const seconds = Number(arg('--http-seconds', 5))
  const r = await realPath(n)
  const f1 = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1))
  console.log(
    `\nThe host's real path — ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'}: ${n} requests, one per event-loop turn, 8 keys × 2 dims, the host committing a call-log row per request on its own connection to the same file; ` +
      `no quota and the engine in ${SHARE_ROUNDS} alternating rounds, their rows the round of the median share\n`,
  )
  console.log('| per request | p50 µs | p99 µs | the quota calls\' share, p50 µs | share, p99 µs | inside the quota calls, p50 µs | inside, p99 µs |')
  console.log('|---|---:|---:|---:|---:|---:|---:|')
  const share = (x) => `${f1(x.p50 - r.noQuota.p50)} | ${f1(Math.max(0, x.p99 - r.noQuota.p99))}`
  const inside = (x) => `${f1(x.p50)} | ${f1(x.p99)}`
  console.log(`| no quota (the host's insert alone) | ${f1(r.noQuota.p50)} | ${f1(r.noQuota.p99)} | – | – | – | – |`)
  console.log(`| the engine: enforce → insert → record | ${f1(r.withEngine.p50)} | ${f1(r.withEngine.p99)} | ${share(r.withEngine)} | ${inside(r.inside.withEngine)} |`)
  console.log(`| the JS baseline (old engine's way) | ${f1(r.withBaseline.p50)} | ${f1(r.withBaseline.p99)} | ${share(r.withBaseline)} | ${inside(r.inside.withBaseline)} |`)
  console.log(`| the engine, the host writes nothing (enforce → record) | ${f1(r.quietHost.p50)} | ${f1(r.quietHost.p99)} | ${f1(r.quietHost.p50)} | ${f1(r.quietHost.p99)} | – | – |`)
  console.log(`| insert → SqliteQuotaStore.consume × 2 dims, the engine | ${f1(r.consumeOnPath.p50)} | ${f1(r.consumeOnPath.p99)} | ${share(r.consumeOnPath)} | ${inside(r.inside.consumeOnPath)} |`)
  console.log(`| insert → SqliteQuotaStore.consume × 2 dims, the baseline | ${f1(r.consumeBaseline.p50)} | ${f1(r.consumeBaseline.p99)} | ${share(r.consumeBaseline)} | ${inside(r.inside.consumeBaseline)} |`)
  console.log(`\n(the engine's share, p50, in the ${SHARE_ROUNDS} rounds: ${f1(r.shares.lowest)} – ${f1(r.shares.highest)} µs)`)
  const ratio = (b, e) => (b / Math.max(0.01, e)).toFixed(1)
  console.log(
    `\n(engine vs baseline, p50: enforce + record ${ratio(r.withBaseline.p50 - r.noQuota.p50, r.withEngine.p50 - r.noQuota.p50)}× by share, ` +
      `${ratio(r.inside.withBaseline.p50, r.inside.withEngine.p50)}× inside the calls; consume ${ratio(r.consumeBaseline.p50 - r.noQuota.p50, r.consumeOnPath.p50 - r.noQuota.p50)}× by share, ` +
      `${ratio(r.inside.consumeBaseline.p50, r.inside.consumeOnPath.p50)}× inside the calls; record commits: ${r.commitsPerSec.toFixed(0)}/s at ${r.withEngine.opsPerSec.toFixed(0)} requests/s)`,
  )
  // The engine commits its buffered records from a timer, between requests, where neither
  // column above looks: the mean wall time of a request, every turn included, counts them.
  const mean = (x) => 1e6 / x.opsPerSec
  const more = (x) => `${f1(mean(x))} µs (+${f1(mean(x) - mean(r.noQuota))})`
  console.log(
    `(mean wall time per request, every turn and timer included: no quota ${f1(mean(r.noQuota))} µs; the engine ${more(r.withEngine)}, ` +
      `the baseline ${more(r.withBaseline)}; consume: the engine ${more(r.consumeOnPath)}, the baseline ${more(r.consumeBaseline)})`,
  )

  // One 5 s run swings by tens of points on a shared 2-core VM: rounds of off then on, each
  // row the round whose ratio is the median, and the lowest and highest ratio beside it.
  if (HTTP_ROUNDS < 1) return
  const rounds = []
  for (let round = 0; round < HTTP_ROUNDS; round++) {
    const off = await httpRun(false, seconds)
    const on = await httpRun(true, seconds)
    rounds.push({ off, on, ratio: on.rps / off.rps })
  }
  const { median, lowest, highest } = medianRound(rounds)
  const { off, on } = median
  console.log(
    `\nEnd to end over HTTP — node:http server (enforce → simulated upstream → record → the host's insert), autocannon 32 connections, ${seconds} s each, ` +
      `${HTTP_ROUNDS} rounds of off then on: the median round\n`,
  )
  console.log('| quota | req/s | p50 ms | p99 ms | server CPU µs per request | non-2xx | errors |')
  console.log('|---|---:|---:|---:|---:|---:|---:|')
  for (const [name, x] of [['off', off], ['on (the engine)', on]]) {
    console.log(`| ${name} | ${Math.round(x.rps).toLocaleString('en-US')} | ${x.p50} | ${x.p99} | ${f1(x.cpuPerRequest)} | ${x.non2xx} | ${x.errors} |`)
  }
  const pct = (ratio) => `${(ratio * 100).toFixed(1)} %`
  console.log(
    `\n(quota on: ${pct(median.ratio)} of the req/s with quota off, rounds ${pct(lowest)} – ${pct(highest)}; ` +
      `the server's CPU per request +${f1(on.cpuPerRequest - off.cpuPerRequest)} µs)`,
  )
}

if (process.argv[2] === '--serve') serve(process.argv[3] === 'on')
else await main()
