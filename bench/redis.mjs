// The Redis driver against what the host's TypeScript driver does today, on one
// redis-server on this machine (loopback).
//
//   node bench/redis.mjs [--ops N] [--max-ms MS] [--url redis://host:port]
//
// Without --url a redis-server is started on a free loopback port and stopped at the end.
// Rows: consume, peek (from the counter view, and read.lua with it off), poolConsumedTotal (pools of 10, 1 000 and 10 000 keys), enforceQuotaShare
// (8 keys × 2 dimensions; from the counter view, and with it off), recordConsumption (write-behind, and one script per record),
// serial and 64 concurrent (Promise.all batches of 64); then Redis commands per request
// under load (INFO commandstats). The
// baseline is a plain ioredis client doing what the TypeScript driver does: per consume
// INCRBYFLOAT, two EXPIREs and an MGET (awaited one after the other, and pipelined in one
// round trip); per peek an MGET; per pool total an MGET of every key's two buckets; per
// enforce a peek and a pool total per dimension. Each row: a warm-up, then up to N ops or
// MS ms, whichever comes first; latency per op from process.hrtime.bigint (concurrent
// rows: from the batch's start to the op's resolution). Run the release build
// (`node scripts/build-native.js` builds it).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import { measurer } from './measure.mjs'
import Redis from 'ioredis'
import { startRedis } from '../__test__/support/redis-server.mjs'

const argv = process.argv.slice(2)
const arg = (name, fallback) => {
  const i = argv.indexOf(name)
  return i >= 0 ? argv[i + 1] : fallback
}
const MAX_OPS = Number(arg('--ops', 20_000))
const MAX_MS = Number(arg('--max-ms', 1_000))
const WARMUP = Math.min(500, MAX_OPS)
const CONCURRENCY = 64

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'quota-bench-redis-'))
process.env.DATA_DIR = tmp // the metadata (pools, plans) stays in SQLite

const require = createRequire(import.meta.url)
const engine = require('@omniroute/quota-engine')
const native = require('../binding.js')

const server = arg('--url') ? null : await startRedis()
const url = arg('--url') || server.url
const plain = new Redis(url)
const store = new engine.RedisQuotaStore(url)
const client = await engine.getRedisClient(url)

const { serial, concurrent } = measurer({ maxOps: MAX_OPS, maxMs: MAX_MS, warmup: WARMUP, concurrency: CONCURRENCY })

const rows = []
async function row(operation, who, fn, { both = true } = {}) {
  rows.push({ operation, who, mode: 'serial', ...(await serial(fn)) })
  if (both) rows.push({ operation, who, mode: `${CONCURRENCY} concurrent`, ...(await concurrent(fn)) })
}

// What the TypeScript driver does.
const HOUR = 3_600_000
const TTL = Math.ceil((2 * HOUR) / 1000)
const bucketKey = (apiKeyId, dim, bucket) => `omniroute:quota:${apiKeyId}:${dim.poolId}:${dim.unit}:${dim.window}:${bucket}`
async function tsConsume(apiKeyId, dim, cost) {
  const bucket = Math.floor(Date.now() / HOUR)
  const curr = bucketKey(apiKeyId, dim, bucket)
  const prev = bucketKey(apiKeyId, dim, bucket - 1)
  await plain.incrbyfloat(curr, cost)
  await plain.expire(curr, TTL)
  await plain.expire(prev, TTL)
  return plain.mget(curr, prev)
}
async function tsConsumePipelined(apiKeyId, dim, cost) {
  const bucket = Math.floor(Date.now() / HOUR)
  const curr = bucketKey(apiKeyId, dim, bucket)
  const prev = bucketKey(apiKeyId, dim, bucket - 1)
  return plain.pipeline().incrbyfloat(curr, cost).expire(curr, TTL).expire(prev, TTL).mget(curr, prev).exec()
}
function tsPeek(apiKeyId, dim) {
  const bucket = Math.floor(Date.now() / HOUR)
  return plain.mget(bucketKey(apiKeyId, dim, bucket), bucketKey(apiKeyId, dim, bucket - 1))
}
async function tsPoolTotal(keys, dim) {
  const bucket = Math.floor(Date.now() / HOUR)
  const values = await plain.mget(...keys.flatMap((k) => [bucketKey(k, dim, bucket), bucketKey(k, dim, bucket - 1)]))
  return values.reduce((sum, v) => sum + (v === null ? 0 : Number(v)), 0)
}

function pool(size, name) {
  const allocations = Array.from({ length: size }, (_, i) => ({ apiKeyId: `${name}-k${i}`, weight: 100 / size, policy: 'hard' }))
  return engine.createPool({ connectionId: `${name}-conn`, name, allocations })
}

// consume / peek on one key.
const dim = { poolId: 'bench', unit: 'requests', window: 'hourly' }
await row('consume', 'engine (write.lua)', () => store.consume('k', dim, 1))
await row('consume', 'baseline: INCRBYFLOAT, 2×EXPIRE, MGET awaited', () => tsConsume('k', dim, 1))
await row('consume', 'baseline: the same 4 commands pipelined', () => tsConsumePipelined('k', dim, 1))
await row('peek', 'engine, counter view (default)', () => store.peek('k', dim))
process.env.QUOTA_STORE_REDIS_VIEW_MS = '0'
await row('peek', 'engine, QUOTA_STORE_REDIS_VIEW_MS=0 (read.lua via tokio)', () => store.peek('k', dim))
delete process.env.QUOTA_STORE_REDIS_VIEW_MS
await row('peek', 'baseline: MGET', () => tsPeek('k', dim))

// Pool totals: the engine sums the allocations' buckets (and the members set) in Lua
// (the default, exact beside old replicas), or reads the buckets' totals
// (QUOTA_STORE_REDIS_POOL_TOTALS=aggregate, docs/redis.md#pool-totals). The aggregate
// store has its own backend (the mode is read when a URL's backend is created): the same
// server under another URL string (a fragment the driver ignores).
process.env.QUOTA_STORE_REDIS_POOL_TOTALS = 'aggregate'
const aggregate = new engine.RedisQuotaStore(`${url}#pool-totals=aggregate`)
await aggregate.peek('k', dim)
delete process.env.QUOTA_STORE_REDIS_POOL_TOTALS
for (const size of [10, 1000, 10_000]) {
  const p = pool(size, `pool${size}`)
  const d = { poolId: p.id, unit: 'tokens', window: 'hourly' }
  const keys = p.allocations.map((a) => a.apiKeyId)
  for (const k of keys) await store.consume(k, d, 3)
  // 10 000 keys: serial only (64 calls of ~25 ms each, queued in Redis, would pass the timeout).
  const both = size < 10_000
  await row(`poolConsumedTotal, ${size} keys`, 'engine (read.lua), exact (default)', () => store.poolConsumedTotal(p.id, d), { both })
  await row(`poolConsumedTotal, ${size} keys`, 'engine (read.lua), aggregate: 2 GETs', () => aggregate.poolConsumedTotal(p.id, d), { both })
  await row(`poolConsumedTotal, ${size} keys`, `baseline: MGET of ${2 * size} keys`, () => tsPoolTotal(keys, d), { both })
}

// The hot path: 8 keys, a plan with 2 dimensions, saturation cached.
const hot = pool(8, 'hot')
engine.upsertProviderPlan({ connectionId: 'hot-conn', provider: 'bench', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1e9 }, { unit: 'tokens', window: 'hourly', limit: 1e12 }], source: 'manual' })
engine.registerSaturationFetcher('bench', async () => 0.1)
const hotKeys = hot.allocations.map((a) => a.apiKeyId)
const request = (i) => ({ apiKeyId: hotKeys[i % 8], connectionId: 'hot-conn', provider: 'bench' })
const hotDims = [{ poolId: hot.id, unit: 'requests', window: 'hourly' }, { poolId: hot.id, unit: 'tokens', window: 'hourly' }]
for (const k of hotKeys) await engine.recordConsumption({ apiKeyId: k, connectionId: 'hot-conn', provider: 'bench', cost: { tokens: 100 } })

process.env.QUOTA_STORE_DRIVER = 'redis'
process.env.QUOTA_STORE_REDIS_URL = url
engine.resetQuotaStoreSingleton()
if (!((await engine.getQuotaStore()) instanceof engine.RedisQuotaStore)) throw new Error('the factory did not pick Redis')
// Nothing changes the counters here: after each key's first read the counter view decides
// (docs/redis.md#the-counter-view); QUOTA_STORE_REDIS_VIEW_MS=0 is the read on every call.
await row('enforceQuotaShare, 2 dims', 'engine on Redis, counter view (default)', (i) => engine.enforceQuotaShare(request(i)))
process.env.QUOTA_STORE_REDIS_VIEW_MS = '0'
await row('enforceQuotaShare, 2 dims', 'engine on Redis, QUOTA_STORE_REDIS_VIEW_MS=0 (one read.lua)', (i) => engine.enforceQuotaShare(request(i)))
delete process.env.QUOTA_STORE_REDIS_VIEW_MS
await row('enforceQuotaShare, no pool', 'engine on Redis (decided from metadata)', (i) => engine.enforceQuotaShare({ ...request(i), apiKeyId: 'nobody' }), { both: false })
await row('enforceQuotaShare, 2 dims', 'baseline: peek + pool total per dimension', async (i) => {
  const k = hotKeys[i % 8]
  await Promise.all(hotDims.flatMap((d) => [tsPeek(k, d), tsPoolTotal(hotKeys, d)]))
})
await row('recordConsumption, 2 dims', 'engine on Redis, write-behind (default)', (i) => engine.recordConsumption({ ...request(i), cost: { tokens: 10 } }))
process.env.QUOTA_RECORD_FLUSH_MS = '0'
await row('recordConsumption, 2 dims', 'engine on Redis, QUOTA_RECORD_FLUSH_MS=0 (one write.lua per record)', (i) => engine.recordConsumption({ ...request(i), cost: { tokens: 10 } }))
delete process.env.QUOTA_RECORD_FLUSH_MS
engine.flushQuotaWrites()

// Redis commands per request under load (INFO commandstats): LOAD requests, 64 at a time,
// each an enforceQuotaShare then a recordConsumption, with and without write-behind.
const LOAD = Math.min(MAX_OPS, 4096)
async function commandsPerRequest(flushMs) {
  if (flushMs === undefined) delete process.env.QUOTA_RECORD_FLUSH_MS
  else process.env.QUOTA_RECORD_FLUSH_MS = String(flushMs)
  engine.flushQuotaWrites()
  await plain.config('RESETSTAT')
  const started = process.hrtime.bigint()
  for (let i = 0; i < LOAD; i += CONCURRENCY) {
    await Promise.all(Array.from({ length: Math.min(CONCURRENCY, LOAD - i) }, async (_, j) => {
      await engine.enforceQuotaShare(request(i + j))
      await engine.recordConsumption({ ...request(i + j), cost: { tokens: 10 } })
    }))
  }
  engine.flushQuotaWrites()
  const ms = Number(process.hrtime.bigint() - started) / 1e6
  const stats = await plain.info('commandstats')
  const calls = {}
  for (const [, name, n] of stats.matchAll(/cmdstat_([^:]+):calls=(\d+)/g)) {
    if (name !== 'info' && name !== 'config' && !name.startsWith('config|')) calls[name] = Number(n)
  }
  delete process.env.QUOTA_RECORD_FLUSH_MS
  const total = Object.values(calls).reduce((a, b) => a + b, 0)
  return { flushMs: flushMs ?? 10, perRequest: total / LOAD, calls, reqPerSec: (LOAD * 1000) / ms }
}
const load = [await commandsPerRequest(undefined), await commandsPerRequest(0)]
await row('recordConsumption, 2 dims', 'baseline: consume per dimension', (i) => Promise.all(hotDims.map((d) => tsConsume(hotKeys[i % 8], d, d.unit === 'tokens' ? 10 : 1))))

delete process.env.QUOTA_STORE_DRIVER
delete process.env.QUOTA_STORE_REDIS_URL
engine.resetQuotaStoreSingleton()
await engine.getQuotaStore()
await row('enforceQuotaShare, 2 dims', 'engine on SQLite (sync crossing)', (i) => engine.enforceQuotaShare(request(i)))

// What the crossing itself costs: the same PING through the engine (its shared connection
// on the I/O runtime, settled through a napi promise) and through ioredis.
await row('PING', 'engine client (napi promise + tokio)', () => client.ping())
await row('PING', 'ioredis', () => plain.ping())
await row('crossing only', 'engine: redisTarget (sync, no I/O)', () => native.redisTarget(url), { both: false })

// The PING rows above run one after the other, and on a shared machine the loopback's
// round trip drifts by more than the difference between them: the same two clients again,
// interleaved in 8 rounds of 5,000 serial PINGs each, the p50 of each round.
async function pingRound(fn, n = 5000) {
  const lat = new Float64Array(n)
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint()
    await fn()
    lat[i] = Number(process.hrtime.bigint() - t0) / 1000
  }
  return lat.sort()[n >> 1]
}
const pingRounds = { engine: [], ioredis: [] }
for (let r = 0; r < 8; r++) {
  pingRounds.engine.push(await pingRound(() => client.ping()))
  pingRounds.ioredis.push(await pingRound(() => plain.ping()))
}
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1]

const fmt = (n) => (n >= 100 ? n.toFixed(0) : n.toFixed(1))
console.log(`\n\`node bench/redis.mjs${argv.length ? ` ${argv.join(' ')}` : ''}\` — ${os.cpus().length} × ${os.cpus()[0].model.trim()}, Node ${process.version}, redis-server ${(await plain.info('server')).match(/redis_version:(\S+)/)[1]} on loopback\n`)
console.log('| operation | implementation | mode | ops/s | p50 µs | p99 µs |')
console.log('|---|---|---|---:|---:|---:|')
for (const r of rows) console.log(`| ${r.operation} | ${r.who} | ${r.mode} | ${Math.round(r.opsPerSec).toLocaleString('en-US')} | ${fmt(r.p50)} | ${fmt(r.p99)} |`)
console.log('\nPING, serial, interleaved rounds (p50 µs of each round of 5,000; the engine via tokio):\n')
console.log('| client | round p50s | median | rounds faster |')
console.log('|---|---|---:|---:|')
const faster = pingRounds.engine.filter((e, i) => e < pingRounds.ioredis[i]).length
console.log(`| engine | ${pingRounds.engine.map(fmt).join(' ')} | ${fmt(median(pingRounds.engine))} | ${faster} of 8 |`)
console.log(`| ioredis | ${pingRounds.ioredis.map(fmt).join(' ')} | ${fmt(median(pingRounds.ioredis))} | ${8 - faster} of 8 |`)
console.log(`\nRedis commands per request (enforce + record), ${LOAD} requests ${CONCURRENCY} at a time (INFO commandstats; a script's inner calls counted by Redis too):\n`)
console.log('| QUOTA_RECORD_FLUSH_MS | commands / request | evalsha / request | requests/s | by command |')
console.log('|---:|---:|---:|---:|---|')
for (const l of load) console.log(`| ${l.flushMs} | ${l.perRequest.toFixed(2)} | ${((l.calls.evalsha || 0) / LOAD).toFixed(3)} | ${Math.round(l.reqPerSec).toLocaleString('en-US')} | ${Object.entries(l.calls).map(([k, v]) => `${k} ${v}`).join(', ')} |`)

plain.disconnect()
engine.resetRedisClient()
engine.closeQuotaDb()
await server?.stop()
fs.rmSync(tmp, { recursive: true, force: true })
