// Over-admission with several processes bursting at one limit on Redis (issue 17 item 3):
// P processes (default 4), each its own engine, share one redis-server (started here on a
// free loopback port) and the host's SQLite file (metadata). One pool, a requests/hourly
// limit L, starting empty; at one signal every process runs C concurrent workers, each
// looping enforce → (simulated upstream call) → record until it is blocked. How far past
// the limit does the pool end — default admission with the counter view
// (QUOTA_STORE_REDIS_VIEW_MS=100, the default), default without it (=0), and reserve mode
// (exact)? Prints a markdown table.
//
//   node bench/over-admission-processes.mjs [--processes P] [--limit L] [--concurrency C]
//     [--upstream-ms MS] [--rounds R] [--flush-ms F (QUOTA_RECORD_FLUSH_MS, default 10)]
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { REDIS_SKIP, startRedis } from '../__test__/support/redis-server.mjs'

const require = createRequire(import.meta.url)
const self = fileURLToPath(import.meta.url)
const argv = process.argv.slice(2)
function arg(name, fallback) {
  const i = argv.indexOf(name)
  return i >= 0 ? Number(argv[i + 1]) : fallback
}

if (process.env.QE_BENCH_CHILD) {
  await child()
} else {
  await parent()
}

/** One process: its engine, its workers; prints "READY", waits for "GO", prints the result. */
async function child() {
  const engine = require('../index.js')
  const [dbPath, connectionId, key, concurrency, upstreamMs, warmConnectionId] = argv
  engine.installHost({ dbPath, logger: { warn() {}, info() {}, debug() {} } })
  const request = { apiKeyId: key, connectionId, provider: 'bench' }
  await engine.getQuotaStore()
  // Connected, the tracking connection subscribed (with the view on), the scripts loaded —
  // on a pool of its own (in reserve mode an enforce reserves).
  const warm = { ...request, connectionId: warmConnectionId }
  for (let i = 0; i < 20; i++) {
    const decision = await engine.enforceQuotaShare(warm)
    await engine.recordConsumption({ ...warm, cost: { requests: 1 }, reservation: decision.reservation })
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  process.stdout.write('READY\n')
  await new Promise((resolve) => process.stdin.once('data', resolve))
  let admitted = 0
  let fromView = 0
  const worker = async () => {
    for (;;) {
      const decision = await engine.enforceQuotaShare(request)
      if (decision.kind !== 'allow') return
      admitted++
      await new Promise((resolve) => setTimeout(resolve, Number(upstreamMs)))
      await engine.recordConsumption({ ...request, cost: { requests: 1 }, reservation: decision.reservation })
    }
  }
  const hits = () => Number(/quota_engine_redis_view_hits_total (\d+)/.exec(engine.metrics())[1])
  const before = hits()
  await Promise.all(Array.from({ length: Number(concurrency) }, worker))
  fromView = hits() - before
  engine.flushQuotaWrites()
  process.stdout.write(`RESULT ${admitted} ${fromView}\n`)
  engine.resetQuotaStoreSingleton()
  engine.closeQuotaDb()
  process.exit(0)
}

async function parent() {
  const PROCESSES = arg('--processes', 4)
  const LIMIT = arg('--limit', 200)
  const CONCURRENCY = arg('--concurrency', 16)
  const UPSTREAM_MS = arg('--upstream-ms', 2)
  const ROUNDS = arg('--rounds', 3)
  const FLUSH_MS = arg('--flush-ms', 10)
  if (REDIS_SKIP) {
    console.log(`skipped: ${REDIS_SKIP}`)
    return
  }
  const engine = require('../index.js')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-over-admission-p-'))
  const dbPath = path.join(dir, 'storage.sqlite')
  engine.installHost({ dbPath, logger: { warn() {}, info() {}, debug() {} } })
  const server = await startRedis()
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = server.url
  engine.resetQuotaStoreSingleton()
  const store = await engine.getQuotaStore()

  let seq = 0
  async function run(mode) {
    const id = ++seq
    const connectionId = `conn-${id}`
    const warmConnectionId = `warm-${id}`
    const keys = Array.from({ length: PROCESSES }, (_, i) => `key-${id}-${i}`)
    let pool
    for (const [conn, limit] of [[connectionId, LIMIT], [warmConnectionId, 1e9]]) {
      const made = engine.createPool({
        connectionId: conn,
        name: `bench-${conn}`,
        allocations: keys.map((apiKeyId) => ({ apiKeyId, weight: 100 / PROCESSES, policy: 'hard' })),
      })
      engine.upsertProviderPlan({
        connectionId: conn,
        provider: 'bench',
        dimensions: [{ unit: 'requests', window: 'hourly', limit }],
        source: 'manual',
      })
      pool ??= made
    }
    const left = 3_600_000 - (Date.now() % 3_600_000)
    if (left < 20_000) await new Promise((resolve) => setTimeout(resolve, left + 10))
    const env = {
      ...process.env,
      QE_BENCH_CHILD: '1',
      QUOTA_ADMISSION: mode.admission,
      QUOTA_STORE_REDIS_VIEW_MS: String(mode.viewMs),
      QUOTA_RECORD_FLUSH_MS: String(FLUSH_MS),
    }
    const children = keys.map((key) =>
      spawn(process.execPath, [self, dbPath, connectionId, key, String(CONCURRENCY), String(UPSTREAM_MS), warmConnectionId], {
        env,
        stdio: ['pipe', 'pipe', 'inherit'],
      }),
    )
    const lines = children.map((c) => {
      let out = ''
      const waiters = []
      c.stdout.on('data', (b) => {
        out += b
        for (const w of waiters.splice(0)) w()
      })
      return async (prefix) => {
        for (;;) {
          const line = out.split('\n').find((l) => l.startsWith(prefix))
          if (line) return line
          await new Promise((resolve) => waiters.push(resolve))
        }
      }
    })
    await Promise.all(lines.map((l) => l('READY')))
    for (const c of children) c.stdin.write('GO\n')
    const results = await Promise.all(lines.map((l) => l('RESULT')))
    await Promise.all(children.map((c) => new Promise((resolve) => (c.exitCode === null ? c.once('exit', resolve) : resolve()))))
    let admitted = 0
    let fromView = 0
    for (const r of results) {
      const [, a, v] = r.split(' ')
      admitted += Number(a)
      fromView += Number(v)
    }
    const dim = { poolId: pool.id, unit: 'requests', window: 'hourly' }
    const total = await store.poolConsumedTotal(pool.id, dim)
    return { admitted, fromView, total, over: total - LIMIT }
  }

  const modes = [
    { name: 'default, counter view (100 ms)', admission: 'default', viewMs: 100 },
    { name: 'default, no view', admission: 'default', viewMs: 0 },
    { name: 'reserve', admission: 'reserve', viewMs: 100 },
  ]
  const rows = []
  for (const mode of modes) {
    const runs = []
    for (let r = 0; r < ROUNDS; r++) runs.push(await run(mode))
    rows.push({ mode, runs })
  }
  console.log(
    `\n\`node bench/over-admission-processes.mjs\` — ${PROCESSES} processes × ${CONCURRENCY} workers, ` +
      `one pool, requests limit ${LIMIT} from empty, enforce → ${UPSTREAM_MS} ms upstream → record until blocked, ` +
      `QUOTA_RECORD_FLUSH_MS=${FLUSH_MS}, ${ROUNDS} runs each (Node ${process.version}, ${os.cpus().length} cores)\n`,
  )
  console.log('| admission | admitted | decided from the view | pool after | past the limit (worst run) |')
  console.log('|---|---:|---:|---:|---:|')
  for (const { mode, runs } of rows) {
    const worst = runs.reduce((a, b) => (b.over > a.over ? b : a))
    const admitted = runs.map((r) => r.admitted).join(' / ')
    const view = runs.map((r) => r.fromView).join(' / ')
    console.log(`| ${mode.name} | ${admitted} | ${view} | ${worst.total} | ${worst.over > 0 ? '+' : ''}${worst.over} |`)
  }
  engine.resetQuotaStoreSingleton()
  engine.resetRedisClient()
  engine.closeQuotaDb()
  await server.stop()
  fs.rmSync(dir, { recursive: true, force: true })
}
