// Over-admission near the limit (issue #7): a pool of N keys with a requests limit L,
// pre-filled to L − 1; C concurrent enforce → (simulated upstream call) → record cycles.
// How far past the limit does the pool end, in the default mode (peek in enforce, add in
// record) and in reserve mode (QUOTA_ADMISSION=reserve: enforce reserves atomically)?
// On SQLite and on Redis (a redis-server started on a free loopback port; skipped with a
// message when redis-server is not installed). Prints a markdown table.
//
//   node bench/over-admission.mjs [--keys N] [--limit L] [--concurrency C] [--upstream-ms MS] [--rounds R]
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import { REDIS_SKIP, startRedis } from '../__test__/support/redis-server.mjs'

const require = createRequire(import.meta.url)
const engine = require('../index.js')

const argv = process.argv.slice(2)
function arg(name, fallback) {
  const i = argv.indexOf(name)
  return i >= 0 ? Number(argv[i + 1]) : fallback
}
const KEYS = arg('--keys', 8)
const LIMIT = arg('--limit', 100)
const CONCURRENCY = arg('--concurrency', 64)
const UPSTREAM_MS = arg('--upstream-ms', 5)
const ROUNDS = arg('--rounds', 3)

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-over-admission-'))
const warnings = []
engine.installHost({
  dbPath: path.join(dir, 'storage.sqlite'),
  logger: { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} },
})

let seq = 0
/** A fresh pool of KEYS keys on its own connection, a requests/hourly plan of LIMIT. */
function makePool() {
  const id = ++seq
  const connectionId = `conn-${id}`
  const keys = Array.from({ length: KEYS }, (_, i) => `key-${id}-${i}`)
  const pool = engine.createPool({
    connectionId,
    name: `bench-${id}`,
    allocations: keys.map((apiKeyId) => ({ apiKeyId, weight: 100 / KEYS, policy: 'hard' })),
  })
  engine.upsertProviderPlan({
    connectionId,
    provider: 'bench',
    dimensions: [{ unit: 'requests', window: 'hourly', limit: LIMIT }],
    source: 'manual',
  })
  return { pool, connectionId, keys, dim: { poolId: pool.id, unit: 'requests', window: 'hourly' } }
}

/** One run: pre-fill to LIMIT − 1, then CONCURRENCY cycles at once. */
async function run(store, mode) {
  process.env.QUOTA_ADMISSION = mode
  const { connectionId, keys, dim } = makePool()
  // The hour must not turn during the run (the pre-fill would become `prev`).
  const left = 3_600_000 - (Date.now() % 3_600_000)
  if (left < 10_000) await new Promise((resolve) => setTimeout(resolve, left + 10))
  await store.consume(keys[0], dim, LIMIT - 1)
  let admitted = 0
  const cycle = async (i) => {
    const request = { apiKeyId: keys[i % KEYS], connectionId, provider: 'bench' }
    const decision = await engine.enforceQuotaShare(request)
    if (decision.kind !== 'allow') return
    admitted++
    await new Promise((resolve) => setTimeout(resolve, UPSTREAM_MS)) // the upstream call
    await engine.recordConsumption({ ...request, cost: { requests: 1 }, reservation: decision.reservation })
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, (_, i) => cycle(i)))
  const total = await store.poolConsumedTotal(dim.poolId, dim)
  return { admitted, total, over: total - LIMIT }
}

async function driver(name, store) {
  const rows = []
  for (const mode of ['default', 'reserve']) {
    const runs = []
    for (let r = 0; r < ROUNDS; r++) runs.push(await run(store, mode))
    const worst = runs.reduce((a, b) => (b.over > a.over ? b : a))
    rows.push({ name, mode, runs, worst })
  }
  return rows
}

const rows = []
engine.resetQuotaStoreSingleton()
delete process.env.QUOTA_STORE_DRIVER
rows.push(...(await driver('SQLite', engine.getSqliteQuotaStore())))

let server = null
let redisNote = ''
if (REDIS_SKIP) {
  redisNote = `Redis skipped: ${REDIS_SKIP}`
} else {
  server = await startRedis()
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = server.url
  engine.resetQuotaStoreSingleton()
  const store = await engine.getQuotaStore()
  if (!(store instanceof engine.RedisQuotaStore)) throw new Error('the factory did not choose Redis')
  rows.push(...(await driver('Redis', store)))
}

console.log(
  `\n\`node bench/over-admission.mjs\` — ${KEYS} keys, requests limit ${LIMIT}, pre-filled to ${LIMIT - 1}, ` +
    `${CONCURRENCY} concurrent enforce → ${UPSTREAM_MS} ms upstream → record cycles, ${ROUNDS} runs each ` +
    `(Node ${process.version}, ${os.cpus().length} cores)\n`,
)
console.log('| driver | admission | admitted (of ' + CONCURRENCY + ') | pool after | past the limit (worst run) |')
console.log('|---|---|---:|---:|---:|')
for (const { name, mode, runs, worst } of rows) {
  const admitted = runs.map((r) => r.admitted).join(' / ')
  console.log(`| ${name} | ${mode} | ${admitted} | ${worst.total} | ${worst.over > 0 ? '+' : ''}${worst.over} |`)
}
if (redisNote) console.log(`\n${redisNote}`)
if (warnings.length) console.log(`\n${warnings.length} warnings, first: ${JSON.stringify(warnings[0])}`)

engine.resetQuotaStoreSingleton()
engine.resetRedisClient()
engine.closeQuotaDb()
await server?.stop()
fs.rmSync(dir, { recursive: true, force: true })
