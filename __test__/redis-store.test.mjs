// RedisQuotaStore (docs/contract.md §4, Redis; appendix `redisQuotaStore`) against real
// `redis-server` processes started here: the shared store suite, interop with the host's
// TypeScript driver's key format through a plain client (ioredis), TTLs, NOSCRIPT
// recovery, a server killed and restarted mid-run, a stalled server, 8 processes on one
// key, the ioredis-like client, and the driver factory.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import net from 'node:net'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'
import Redis from 'ioredis'
import { makeDataDir, openHost } from './support/store-env.mjs'
import { storeSuite } from './support/store-suite.mjs'
import { REDIS_SKIP, startRedis, freePort } from './support/redis-server.mjs'
import { useRedisServer, server, plain, stopped } from './support/redis-engine.mjs'
import {
  RedisQuotaStore,
  getRedisClient,
  getRedisQuotaStore,
  resetRedisQuotaStore,
} from '@omniroute/quota-engine/compat/redisQuotaStore'
import { getQuotaStore, resetQuotaStoreSingleton } from '@omniroute/quota-engine/compat/storeFactory'

const dataDir = makeDataDir('redis-store')
const require = createRequire(import.meta.url)
const { StoreDriver } = require('../lib/stores.js')
const qe = require('@omniroute/quota-engine')
const { WINDOW_MS, createPool, getSqliteQuotaStore } = qe
const skip = REDIS_SKIP
const worker = fileURLToPath(new URL('./support/redis-consume-worker.mjs', import.meta.url))

const warnings = []
const logger = { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} }
useRedisServer(logger)

storeSuite(
  'redis',
  () => ({
    store: getRedisQuotaStore(server.url),
    at: {
      consume: (apiKeyId, dim, cost, nowMs) => new StoreDriver(server.url).consume(apiKeyId, dim, cost, nowMs),
      peek: (apiKeyId, dim, nowMs) => new StoreDriver(server.url).peek(apiKeyId, dim, nowMs),
      poolConsumedTotal: (dim, nowMs) => new StoreDriver(server.url).poolConsumedTotal(dim, nowMs),
    },
    countWrites: () => plain.dbsize(),
  }),
  { skip },
)

const bucketOf = (window, now = Date.now()) => Math.floor(now / WINDOW_MS[window])
const keyOf = (apiKeyId, d, bucket) => `omniroute:quota:${apiKeyId}:${d.poolId}:${d.unit}:${d.window}:${bucket}`

/** Waits out the last 2 s of an hour, so a test's writes and reads share their buckets. */
async function clearOfHourEnd() {
  const left = WINDOW_MS.hourly - (Date.now() % WINDOW_MS.hourly)
  if (left < 2000) await new Promise((resolve) => setTimeout(resolve, left + 10))
}

/** What the host's TypeScript driver does per consume: INCRBYFLOAT, two EXPIREs, an MGET. */
async function legacyConsume(apiKeyId, d, cost) {
  const bucket = bucketOf(d.window)
  const ttl = Math.ceil((2 * WINDOW_MS[d.window]) / 1000)
  const curr = keyOf(apiKeyId, d, bucket)
  const prev = keyOf(apiKeyId, d, bucket - 1)
  await plain.incrbyfloat(curr, cost)
  await plain.expire(curr, ttl)
  await plain.expire(prev, ttl)
  return plain.mget(curr, prev)
}

test('the compat entry: a class, one store per URL, resettable', { skip }, () => {
  const a = getRedisQuotaStore(server.url)
  assert.ok(a instanceof RedisQuotaStore)
  assert.equal(a.url, server.url)
  assert.equal(getRedisQuotaStore(server.url), a)
  resetRedisQuotaStore()
  assert.notEqual(getRedisQuotaStore(server.url), a)
  assert.throws(() => new RedisQuotaStore(''), (e) => e instanceof TypeError && e.code === 'ERR_QUOTA_INVALID_ARG')
})

test('a RedisQuotaStore reads its url on each call, as before its driver was kept: a url set later is the one used', { skip }, async () => {
  const store = new RedisQuotaStore(server.url)
  const d = { poolId: `url-later-${process.pid}`, unit: 'requests', window: 'hourly' }
  assert.equal(await store.consume('k', d, 1), 1)
  store.url = 'http://127.0.0.1:1'
  await assert.rejects(store.peek('k', d), (e) => e instanceof RangeError && e.code === 'ERR_QUOTA_INVALID_ARG' && /^url: /.test(e.message))
  store.url = server.url
  assert.equal(await store.peek('k', d), 1)
  await store.clear('k', d)
})

test('ids with separators never share a Redis key: key k in pool x:p and key k:x in pool p stay apart (issue 15 item 5)', { skip }, async () => {
  await clearOfHourEnd()
  const store = new RedisQuotaStore(server.url)
  const a = { poolId: 'sep-x:p', unit: 'requests', window: 'hourly' }
  const b = { poolId: 'p', unit: 'requests', window: 'hourly' }
  await store.consume('sep-k', a, 3)
  await store.consume('sep-k:sep-x', b, 5)
  assert.equal(await store.peek('sep-k', a), 3)
  assert.equal(await store.peek('sep-k:sep-x', b), 5)
  // The escaped names; an id without ':' or '%' keeps the host's name (the interop test below).
  const bucket = bucketOf('hourly')
  assert.equal(await plain.get(`omniroute:quota:sep-k:sep-x%3Ap:requests:hourly:${bucket}`), '3')
  assert.equal(await plain.get(`omniroute:quota:sep-k%3Asep-x:p:requests:hourly:${bucket}`), '5')
  // A '%' is escaped too, so an id that looks escaped is not confused with one that is.
  await store.consume('sep-%3A', b, 1)
  assert.equal(await store.peek('sep-:', b), 0)
  assert.equal(await store.peek('sep-%3A', b), 1)
  await store.clear('sep-k', a)
  assert.equal(await store.peek('sep-k:sep-x', b), 5)
})

test('interop: keys, values and TTLs exactly as the host\'s TypeScript driver writes and reads them', { skip }, async () => {
  await clearOfHourEnd()
  const store = new RedisQuotaStore(server.url)
  const pool = createPool({ connectionId: 'conn-interop', name: 'interop', allocations: [
    { apiKeyId: 'old-replica-key', weight: 50, policy: 'hard' },
    { apiKeyId: 'new-replica-key', weight: 50, policy: 'hard' },
  ] })
  const d = { poolId: pool.id, unit: 'tokens', window: 'hourly' }
  // An old replica writes; the engine reads it.
  await legacyConsume('old-replica-key', d, 120.5)
  await legacyConsume('old-replica-key', d, 10)
  assert.equal(await store.peek('old-replica-key', d), 130.5)
  // The engine writes; an old replica reads the decimal string at the documented key.
  assert.equal(await store.consume('new-replica-key', d, 7.25), 7.25)
  const curr = keyOf('new-replica-key', d, bucketOf('hourly'))
  assert.equal(await plain.get(curr), '7.25')
  assert.deepEqual(await legacyConsume('new-replica-key', d, 0.75), ['8', null])
  assert.equal(await store.peek('new-replica-key', d), 8)
  // The pool total is exact in a mixed fleet: the old replica's key counts through the
  // pool's allocations (it never writes the members sets).
  assert.equal(await store.poolConsumedTotal(pool.id, d), 138.5)
  // TTL: ceil(2 × windowMs / 1000) s on the engine's writes.
  const ttl = await plain.ttl(curr)
  assert.ok(ttl > 7200 - 5 && ttl <= 7200, `ttl ${ttl}`)
  const daily = { poolId: pool.id, unit: 'usd', window: 'daily' }
  await store.consume('new-replica-key', daily, 1)
  const dailyTtl = await plain.ttl(keyOf('new-replica-key', daily, bucketOf('daily')))
  assert.ok(dailyTtl > 172_800 - 5 && dailyTtl <= 172_800, `ttl ${dailyTtl}`)
  const membersTtl = await plain.ttl(`omniroute:quota-members:${pool.id}:usd:daily:${bucketOf('daily')}`)
  assert.ok(membersTtl > 172_800 - 5 && membersTtl <= 172_800, `members ttl ${membersTtl}`)
  // A previous bucket written by an old replica decays like the engine's own.
  const W = WINDOW_MS.hourly
  const now = (bucketOf('hourly') + 1) * W + W / 4
  const prevKey = keyOf('old-replica-key', d, bucketOf('hourly', now) - 1)
  assert.equal(await plain.get(prevKey), '130.5')
  assert.equal(await new StoreDriver(server.url).peek('old-replica-key', d, now), 130.5 * 0.75)
})

test('NOSCRIPT: after SCRIPT FLUSH the next call reloads the script and succeeds', { skip }, async () => {
  const store = new RedisQuotaStore(server.url)
  const d = { poolId: 'noscript', unit: 'requests', window: 'hourly' }
  assert.equal(await store.consume('k', d, 1), 1)
  const loaded = async () => (await plain.call('INFO', 'memory')).match(/number_of_cached_scripts:(\d+)/)[1]
  assert.notEqual(await loaded(), '0')
  assert.equal(await plain.script('FLUSH'), 'OK')
  assert.equal(await loaded(), '0')
  assert.equal(await store.consume('k', d, 1), 2)
  assert.equal(await store.peek('k', d), 2)
  assert.equal(await store.poolConsumedTotal('noscript', d), 2)
  assert.equal(await loaded(), '2', 'both scripts are cached again')
})

test('getRedisClient: an ioredis-like client on the shared connection', { skip }, async () => {
  const client = await getRedisClient(server.url)
  assert.equal(await getRedisClient(server.url), client)
  assert.equal(await client.incrbyfloat('client:f', 0.5), '0.5')
  assert.equal(await client.incrbyfloat('client:f', 2), '2.5')
  assert.equal(await client.expire('client:f', 60), 1)
  assert.equal(await client.expire('client:none', 60), 0)
  assert.deepEqual(await client.mget('client:f', 'client:none'), ['2.5', null])
  assert.deepEqual(await client.mget(['client:f', 'client:none']), ['2.5', null])
  assert.deepEqual(await client.eval("return {KEYS[1], ARGV[1], 7}", 1, 'client:f', 'x'), ['client:f', 'x', 7])
  assert.equal(await client.del('client:f', 'client:none'), 1)
  assert.equal(await client.ping(), 'PONG')
  await assert.rejects(client.eval('return redis.error_reply("boom")', 0), (e) => e.code === 'ERR_QUOTA_STORE' && /boom/.test(e.message))
  assert.equal(await client.quit(), 'OK')
  await assert.rejects(client.ping(), (e) => e.code === 'ERR_QUOTA_REDIS_UNAVAILABLE')
  const again = await getRedisClient(server.url)
  assert.notEqual(again, client)
  assert.equal(await again.ping(), 'PONG')
  await assert.rejects(getRedisClient('mysql://u:secret@h'), (e) => e instanceof RangeError && e.code === 'ERR_QUOTA_INVALID_ARG' && /^url:/.test(e.message) && !e.message.includes('secret'))
  await assert.rejects(getRedisClient(42), (e) => e instanceof TypeError)
})

test('getRedisClient refuses the commands that would change or hold the connection every quota call shares', { skip }, async () => {
  const client = await getRedisClient(server.url)
  for (const words of [['SELECT', 1], ['multi'], ['EXEC'], ['WATCH', 'k'], ['SUBSCRIBE', 'ch'], ['psubscribe', 'c*'], ['CLIENT', 'REPLY', 'SKIP'], ['BLPOP', 'q', 0], ['BZPOPMIN', 'z', 0], ['XREAD', 'BLOCK', 0, 'STREAMS', 's', '$'], ['WAIT', 1, 0], ['MONITOR'], ['HELLO', 3], ['AUTH', 'x'], ['RESET'], ['QUIT'], ['WAITAOF', 1, 0, 0], ['BZMPOP', 0, 1, 'z', 'MIN']]) {
    await assert.rejects(client.call(...words), (e) => e instanceof RangeError && e.code === 'ERR_QUOTA_INVALID_ARG' && /^args\[0\]: /.test(e.message), words.join(' '))
  }
  // Nothing reached the connection: counters still land where every replica reads them.
  const store = new RedisQuotaStore(server.url)
  const d = { poolId: 'client-guard', unit: 'requests', window: 'hourly' }
  assert.equal(await store.consume('k', d, 2), 2)
  assert.equal(await store.peek('k', d), 2)
  assert.equal(await client.call('CLIENT', 'INFO').then((info) => /db=0/.test(info)), true)
  assert.deepEqual(await client.call('XREAD', 'COUNT', 1, 'STREAMS', 'none', '0'), null)
})

test('an unreachable server: calls reject with a connection error within a few seconds', { skip }, async () => {
  const port = await freePort()
  const url = `redis://user:secret@127.0.0.1:${port}`
  const store = new RedisQuotaStore(url)
  const d = { poolId: 'down', unit: 'requests', window: 'hourly' }
  for (const call of [() => store.consume('k', d, 1), () => store.peek('k', d), () => store.poolConsumedTotal('down', d), () => store.clear('k', d)]) {
    const started = Date.now()
    await assert.rejects(call(), (e) => {
      assert.equal(e.code, 'ERR_QUOTA_REDIS_UNAVAILABLE')
      assert.match(e.message, /cannot connect to Redis|did not answer/)
      assert.ok(!e.message.includes('secret'), e.message)
      return true
    })
    assert.ok(Date.now() - started < 3000, `took ${Date.now() - started} ms`)
  }
  const client = await getRedisClient(url)
  await assert.rejects(client.incrbyfloat('x', 1), (e) => e.code === 'ERR_QUOTA_REDIS_UNAVAILABLE' && /refused/i.test(e.message))
})

test('a stalled server (accepts, never answers): every call is bounded by QUOTA_STORE_REDIS_TIMEOUT_MS', { skip }, async () => {
  const sockets = []
  const stall = net.createServer((socket) => sockets.push(socket))
  await new Promise((resolve) => stall.listen(0, '127.0.0.1', resolve))
  process.env.QUOTA_STORE_REDIS_TIMEOUT_MS = '300' // read when the URL's connection is created
  try {
    const store = new RedisQuotaStore(`redis://127.0.0.1:${stall.address().port}`)
    const started = Date.now()
    await assert.rejects(store.consume('k', { poolId: 'stall', unit: 'requests', window: 'hourly' }, 1), (e) =>
      e.code === 'ERR_QUOTA_REDIS_UNAVAILABLE' && /did not answer within 300 ms/.test(e.message))
    const took = Date.now() - started
    assert.ok(took >= 250 && took < 2000, `took ${took} ms`)
  } finally {
    delete process.env.QUOTA_STORE_REDIS_TIMEOUT_MS
    for (const s of sockets) s.destroy()
    stall.close()
  }
})

test('the server killed and restarted mid-run: calls fail fast while it is down, and the next call after the restart succeeds', { skip }, async () => {
  const flaky = await startRedis()
  stopped.push(flaky)
  const store = new RedisQuotaStore(flaky.url)
  const d = { poolId: 'flaky', unit: 'requests', window: 'hourly' }
  for (let i = 1; i <= 50; i++) assert.equal(await store.consume('k', d, 1), i)
  await flaky.kill('SIGKILL')
  // The server answered over plaintext before: no hint that the URL should ask for TLS.
  const down = (e) => e.code === 'ERR_QUOTA_REDIS_UNAVAILABLE' && !/TLS/.test(e.message)
  for (let i = 0; i < 3; i++) {
    const started = Date.now()
    await assert.rejects(store.consume('k', d, 1), down)
    await assert.rejects(store.peek('k', d), down)
    assert.ok(Date.now() - started < 3000)
  }
  await flaky.start() // same port, empty (no persistence)
  assert.equal(await store.consume('k', d, 1), 1, 'the first call after the restart')
  for (let i = 2; i <= 50; i++) assert.equal(await store.consume('k', d, 1), i)
  assert.equal(await store.peek('k', d), 50)
})

test('a password changed on the server and back: calls fail while it is wrong, and the first call after it is right again succeeds', { skip }, async () => {
  const locked = await startRedis()
  stopped.push(locked)
  // A connection made before the password is set stays authenticated.
  const admin = new Redis({ port: locked.port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
  try {
    await admin.config('SET', 'requirepass', 'first')
    const store = new RedisQuotaStore(`redis://:first@127.0.0.1:${locked.port}`)
    const d = { poolId: 'rotated', unit: 'requests', window: 'hourly' }
    await clearOfHourEnd()
    for (let i = 1; i <= 5; i++) assert.equal(await store.consume('k', d, 1), i)
    // Rotated, and the engine's connections dropped: its reconnects fail authentication.
    await admin.config('SET', 'requirepass', 'second')
    await admin.client('KILL', 'TYPE', 'normal') // not the admin's own connection (SKIPME)
    // (The first finds its connection dropped; the next ones, the failed authentication.)
    const errors = []
    for (let i = 0; i < 3; i++) await store.consume('k', d, 1).then(() => assert.fail('consumed with a wrong password'), (e) => errors.push(e.message))
    assert.match(errors.at(-1), /authentication failed/i, errors.join('\n'))
    await admin.config('SET', 'requirepass', 'first')
    assert.equal(await store.consume('k', d, 1), 6, 'the first call after the password is right again')
  } finally {
    admin.disconnect()
  }
})

test('8 processes × 10 000 consumes on one key give exactly 80 000', { skip }, async () => {
  const poolId = `multi-${process.pid}`
  const runs = await Promise.all(
    Array.from({ length: 8 }, () => new Promise((resolve) => {
      const child = spawn(process.execPath, [worker, dataDir, server.url, '10000', 'shared', poolId], { stdio: ['ignore', 'pipe', 'pipe'] })
      let out = ''
      let err = ''
      child.stdout.on('data', (b) => { out += b })
      child.stderr.on('data', (b) => { err += b })
      child.on('exit', (code) => resolve({ code, out, err }))
    })),
  )
  for (const r of runs) {
    assert.equal(r.code, 0, r.err)
    assert.match(r.out, /^DONE 10000 \d+/)
  }
  const store = new RedisQuotaStore(server.url)
  const d = { poolId, unit: 'requests', window: 'daily' }
  assert.equal(await store.peek('shared', d), 80000)
  assert.equal(await plain.get(keyOf('shared', d, bucketOf('daily'))), '80000')
  // The last value each process saw is distinct: no two increments were merged.
  assert.equal(new Set(runs.map((r) => r.out.split(' ')[2])).size, 8)
})

test('a process with an open connection exits by itself', { skip }, async () => {
  const started = Date.now()
  const child = spawn(process.execPath, [worker, dataDir, server.url, '3', 'exit-key', 'exit-pool'], { stdio: ['ignore', 'pipe', 'pipe'] })
  const code = await new Promise((resolve) => child.on('exit', resolve))
  assert.equal(code, 0)
  assert.ok(Date.now() - started < 5000, `took ${Date.now() - started} ms`)
})

test('factory: a reachable Redis URL gives the Redis store; an unreachable one SQLite and a masked warning', { skip }, async () => {
  resetQuotaStoreSingleton()
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = server.url
  try {
    const chosen = await getQuotaStore()
    assert.ok(chosen instanceof RedisQuotaStore)
    assert.equal(chosen.url, server.url)
    resetQuotaStoreSingleton()
    // The host's DB setting wins over the environment.
    const host = openHost(`${dataDir}/storage.sqlite`)
    const port = await freePort()
    host.prepare("INSERT OR REPLACE INTO key_value (namespace, key, value) VALUES ('settings', 'quotaStore', ?)")
      .run(JSON.stringify({ driver: 'redis', redisUrl: `redis://u:hunter2@127.0.0.1:${port}` }))
    warnings.length = 0
    const started = Date.now()
    assert.equal(await getQuotaStore(), getSqliteQuotaStore())
    assert.ok(Date.now() - started < 3000)
    const warning = warnings.find((w) => w.component === 'quota:factory')
    assert.ok(warning, JSON.stringify(warnings))
    assert.match(warning.msg, /falling back to SQLite/)
    assert.ok(!JSON.stringify(warnings).includes('hunter2'), JSON.stringify(warnings))
    // A URL no client can be created for: SQLite too.
    resetQuotaStoreSingleton()
    warnings.length = 0
    host.prepare("INSERT OR REPLACE INTO key_value (namespace, key, value) VALUES ('settings', 'quotaStore', ?)")
      .run(JSON.stringify({ driver: 'redis', redisUrl: 'memcached://u:hunter3@127.0.0.1:11211' }))
    assert.equal(await getQuotaStore(), getSqliteQuotaStore())
    assert.ok(warnings.some((w) => w.component === 'quota:factory' && w.code === 'ERR_QUOTA_INVALID_ARG'), JSON.stringify(warnings))
    assert.ok(!JSON.stringify(warnings).includes('hunter3'), JSON.stringify(warnings))
    host.prepare("DELETE FROM key_value WHERE namespace = 'settings' AND key = 'quotaStore'").run()
    host.close()
  } finally {
    delete process.env.QUOTA_STORE_DRIVER
    delete process.env.QUOTA_STORE_REDIS_URL
    resetQuotaStoreSingleton()
  }
})
