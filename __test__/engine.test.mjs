// The one engine of the process: the driver is chosen by the host's setting and chosen
// again when that setting changes (getQuotaStore at once, the hot path within a second);
// a dbPath resolver that throws or returns a non-string is reported once per problem, as
// the call returns, naming the fallback; the engine's own counters (metrics) count the hot
// path.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import Redis from 'ioredis'
import { openHost } from './support/store-env.mjs'
import { REDIS_SKIP, startRedis } from './support/redis-server.mjs'
import {
  closeQuotaDb,
  createPool,
  deletePool,
  enforceQuotaShare,
  flushQuotaWrites,
  gcConsumption,
  getBucket,
  getQuotaStore,
  getSqliteQuotaStore,
  incrementBucket,
  installHost,
  recordConsumption,
  RedisQuotaStore,
  resetQuotaStoreSingleton,
  resetRedisClient,
  upsertProviderPlan,
} from '@omniroute/quota-engine'

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-engine-'))
const dbPath = path.join(dir, 'storage.sqlite')
const warnings = []
const logger = { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} }
let host

before(() => {
  delete process.env.QUOTA_STORE_DRIVER
  delete process.env.QUOTA_STORE_REDIS_URL
  installHost({ dbPath, logger })
  createPool({ connectionId: 'bootstrap', name: 'bootstrap' }) // the engine creates the schema
  host = openHost(dbPath)
  host.exec("CREATE TABLE IF NOT EXISTS key_value (namespace TEXT, key TEXT, value TEXT, PRIMARY KEY (namespace, key))")
})

after(() => {
  host?.close()
  closeQuotaDb()
  installHost({})
  resetQuotaStoreSingleton()
  fs.rmSync(dir, { recursive: true, force: true })
})

function setSetting(value) {
  if (value === null) host.prepare("DELETE FROM key_value WHERE namespace = 'settings' AND key = 'quotaStore'").run()
  else host.prepare("INSERT OR REPLACE INTO key_value (namespace, key, value) VALUES ('settings', 'quotaStore', ?)").run(JSON.stringify(value))
}

test('the driver follows the host setting: getQuotaStore at once, the hot path within a second', { skip: REDIS_SKIP, timeout: 30_000 }, async () => {
  const server = await startRedis()
  const plain = new Redis(server.url, { maxRetriesPerRequest: 1 })
  try {
    const pool = createPool({ connectionId: 'conn-follow', name: 'follow', allocations: [{ apiKeyId: 'key-follow', weight: 100, policy: 'hard' }] })
    upsertProviderPlan({ connectionId: 'conn-follow', provider: 'follow', dimensions: [{ unit: 'requests', window: 'daily', limit: 1000 }], source: 'manual' })
    const request = { apiKeyId: 'key-follow', connectionId: 'conn-follow', provider: 'follow', cost: { requests: 1 } }
    const dimensionKey = `${pool.id}:requests:daily`
    const bucket = Math.floor(Date.now() / 86_400_000)
    const redisKey = `omniroute:quota:key-follow:${dimensionKey}:${bucket}`
    resetQuotaStoreSingleton()
    assert.equal(await getQuotaStore(), getSqliteQuotaStore())
    await recordConsumption(request)
    assert.equal(getBucket('key-follow', dimensionKey, bucket), 1)

    setSetting({ driver: 'redis', redisUrl: server.url })
    const store = await getQuotaStore()
    assert.ok(store instanceof RedisQuotaStore)
    assert.equal(store.url, server.url)
    await recordConsumption(request)
    assert.equal(flushQuotaWrites(), null) // Redis records are written behind (docs/redis.md#write-behind)
    assert.equal(await plain.get(redisKey), '1', 'the record went to Redis')
    assert.equal(getBucket('key-follow', dimensionKey, bucket), 1, 'not to SQLite')

    // Back to SQLite: the hot path alone notices, within about a second.
    setSetting(null)
    const started = Date.now()
    while ((await plain.get(redisKey)) !== null && Date.now() - started < 3000) {
      await plain.del(redisKey)
      await recordConsumption(request)
      flushQuotaWrites()
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    await recordConsumption(request)
    flushQuotaWrites()
    assert.equal(await plain.get(redisKey), null, 'no record on Redis any more')
    assert.ok(Date.now() - started < 2500, `re-chosen after ${Date.now() - started} ms`)
    assert.ok(getBucket('key-follow', dimensionKey, bucket) >= 2)
    assert.equal(await getQuotaStore(), getSqliteQuotaStore())
    // A decision still decides (and does not hang) across the changes.
    assert.equal((await enforceQuotaShare(request)).kind, 'allow')
  } finally {
    setSetting(null)
    resetQuotaStoreSingleton()
    resetRedisClient()
    plain.disconnect()
    await server.stop()
  }
})

test('a dbPath resolver that throws or returns a non-string is reported once per problem as the call returns, naming the fallback', async () => {
  const before = warnings.length
  // The fallback of a resolver that fails: $DATA_DIR/storage.sqlite — here the same file.
  const savedDataDir = process.env.DATA_DIR
  process.env.DATA_DIR = dir
  const fallback = path.join(dir, 'storage.sqlite')
  installHost({ dbPath: () => fallback, logger })
  closeQuotaDb()
  getBucket('k', 'd', 1) // opens through the resolver
  const storeWarnings = () => warnings.slice(before).filter((w) => w.component === 'quota:store')
  // Each warning reaches the host's logger as the call that opened the file returns.
  for (const [bad, count] of [[() => 42, 1], [() => 42, 1], [() => { throw new Error('boom') }, 2], [() => undefined, 3]]) {
    installHost({ dbPath: bad, logger })
    closeQuotaDb()
    assert.equal(getBucket('k', 'd', 1), 0)
    assert.equal(storeWarnings().length, count)
  }
  // The calls that answer a promise too, each with a problem of its own.
  const dim = { poolId: 'p', unit: 'requests', window: 'hourly' }
  const calls = { deletePool: () => deletePool('none'), gcConsumption, peek: () => getSqliteQuotaStore().peek('k', dim) }
  for (const [name, call] of Object.entries(calls)) {
    const count = storeWarnings().length
    installHost({ dbPath: () => { throw new Error(`boom in ${name}`) }, logger })
    closeQuotaDb()
    const pending = call()
    assert.equal(storeWarnings().length, count + 1, name)
    await pending
  }
  const said = storeWarnings().map((w) => w.msg)
  assert.equal(said.length, 6, said.join('\n'))
  assert.match(said[0], /returned a number instead of a string; using .*storage\.sqlite/)
  assert.match(said[1], /threw: .*boom/)
  assert.match(said[2], /returned undefined/)
  assert.match(said[5], /threw: .*boom in peek/)
  assert.ok(said.every((m) => m.includes(fallback)), 'the fallback is named')
  if (savedDataDir === undefined) delete process.env.DATA_DIR
  else process.env.DATA_DIR = savedDataDir
  installHost({ dbPath, logger })
  closeQuotaDb()
})

/** Two files in `dir` and a dbPath function answering `paths.current` (the first one),
 *  installed on a closed connection. */
function pathFunction(name) {
  const paths = { first: path.join(dir, `${name}-first.sqlite`), second: path.join(dir, `${name}-second.sqlite`) }
  paths.current = paths.first
  installHost({ dbPath: () => paths.current, logger })
  closeQuotaDb()
  return paths
}

test('records carried from a replaced file go to the file the dbPath function names at the flush', async () => {
  const Database = (await import('better-sqlite3')).default
  const paths = pathFunction('carry')
  const { first, second } = paths
  process.env.QUOTA_RECORD_FLUSH_MS = '60000' // the records stay buffered until the flush
  try {
    upsertProviderPlan({ connectionId: 'carry-conn', provider: 'carry', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1e9 }], source: 'manual' })
    const pool = createPool({ connectionId: 'carry-conn', name: 'carry', allocations: [{ apiKeyId: 'carry-key', weight: 50 }] })
    for (let i = 0; i < 3; i++) await recordConsumption({ apiKeyId: 'carry-key', connectionId: 'carry-conn', provider: 'carry', cost: { requests: 1 } })
    // A copy renamed over the file, and the function now names another one.
    fs.copyFileSync(first, `${first}.copy`)
    fs.renameSync(`${first}.copy`, first)
    paths.current = second
    assert.equal(flushQuotaWrites(), null)
    const sum = (file) => {
      const db = new Database(file, { readonly: true })
      try {
        return db.prepare("SELECT coalesce(sum(consumed), 0) AS n FROM quota_consumption WHERE api_key_id = 'carry-key'").get().n
      } catch {
        return 0
      } finally {
        db.close()
      }
    }
    assert.equal(sum(second), 3, `the records are in the file the function names now (pool ${pool.id})`)
    assert.equal(sum(first), 0)
  } finally {
    delete process.env.QUOTA_RECORD_FLUSH_MS
    installHost({ dbPath, logger })
    closeQuotaDb()
  }
})

test('a store call just after the file was renamed away opens the file the dbPath function names now', async () => {
  const Database = (await import('better-sqlite3')).default
  const paths = pathFunction('store')
  const { first, second } = paths
  try {
    upsertProviderPlan({ connectionId: 'store-conn', provider: 'store', dimensions: [{ unit: 'requests', window: 'hourly', limit: 10 }], source: 'manual' })
    // Renamed away with another file put in its place, and the function names another path,
    // all within the 100 ms the per-call check waits between path lookups.
    fs.renameSync(first, `${first}.moved`)
    fs.writeFileSync(first, '')
    paths.current = second
    const pool = createPool({ connectionId: 'store-conn', name: 'store', allocations: [{ apiKeyId: 'store-key', weight: 50 }] })
    const db = new Database(second, { readonly: true })
    try {
      assert.equal(db.prepare('SELECT count(*) AS n FROM quota_pools WHERE id = ?').get(pool.id).n, 1)
    } finally {
      db.close()
    }
  } finally {
    installHost({ dbPath, logger })
    closeQuotaDb()
  }
})

test('a decision made after an awaited driver choice checks the file again', { timeout: 20_000 }, async () => {
  // The crossing checks the file before the call; a decision that waits for the driver
  // choice (a Redis server that never answers) runs later and must look again.
  const net = await import('node:net')
  // Its connections are ended with it: an open one keeps this process alive after its
  // tests (the engine's client may still hold one when the test ends).
  const accepted = new Set()
  const silent = net.createServer((socket) => accepted.add(socket))
  await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve))
  const file = path.join(dir, 'choice.sqlite')
  const snapshot = `${file}.snapshot`
  installHost({ dbPath: () => file, logger })
  closeQuotaDb()
  const request = { apiKeyId: 'choice-key', connectionId: 'choice-conn', provider: 'choice' }
  try {
    upsertProviderPlan({ connectionId: 'choice-conn', provider: 'choice', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1 }], source: 'manual' })
    createPool({ connectionId: 'choice-conn', name: 'choice', allocations: [{ apiKeyId: 'choice-key', weight: 100 }] })
    closeQuotaDb() // the file self-contained: the snapshot has the pool and no consumption
    fs.copyFileSync(file, snapshot)
    await recordConsumption({ ...request, cost: { requests: 1 } })
    assert.equal(flushQuotaWrites(), null)
    assert.equal((await enforceQuotaShare(request)).kind, 'block', 'the hour used up')
    process.env.QUOTA_STORE_DRIVER = 'redis'
    process.env.QUOTA_STORE_REDIS_URL = `redis://127.0.0.1:${silent.address().port}`
    process.env.QUOTA_STORE_REDIS_TIMEOUT_MS = '300'
    resetQuotaStoreSingleton()
    const decision = enforceQuotaShare(request) // checked now; decided after the choice fails
    fs.renameSync(snapshot, file) // the snapshot restored meanwhile
    assert.equal((await decision).kind, 'allow', 'decided from the file now at the path')
  } finally {
    delete process.env.QUOTA_STORE_DRIVER
    delete process.env.QUOTA_STORE_REDIS_URL
    delete process.env.QUOTA_STORE_REDIS_TIMEOUT_MS
    resetQuotaStoreSingleton()
    silent.close()
    for (const socket of accepted) socket.destroy()
    installHost({ dbPath, logger })
    closeQuotaDb()
  }
})

test('installHost called from inside its own dbPath function throws there and changes nothing', () => {
  const inner = path.join(dir, 'from-inside.sqlite')
  let caught
  installHost({
    dbPath: () => {
      try {
        installHost({ dbPath: inner, logger })
      } catch (err) {
        caught = err
      }
      return dbPath
    },
    logger,
  })
  closeQuotaDb()
  incrementBucket('reentrant-key', 'reentrant-dim', 1, 2, Date.now())
  flushQuotaWrites()
  assert.match(String(caught?.message), /installHost cannot be called from inside its own dbPath function/)
  assert.equal(fs.existsSync(inner), false, 'the inner path was not taken')
  const row = host.prepare("SELECT consumed FROM quota_consumption WHERE api_key_id = 'reentrant-key'").get()
  assert.equal(row?.consumed, 2, "the outer function's path is the one written")
  installHost({ dbPath, logger })
  closeQuotaDb()
})

test('a dbPath that is neither a string nor a function is a TypeError naming it, and the installed path stays', () => {
  for (const bad of [42, {}, true]) {
    assert.throws(() => installHost({ dbPath: bad, logger }), (err) => {
      assert.ok(err instanceof TypeError, String(err))
      assert.equal(err.code, 'ERR_QUOTA_INVALID_ARG')
      assert.match(err.message, /^options\.dbPath: expected a string or a function returning one, got /)
      return true
    })
  }
  closeQuotaDb()
  incrementBucket('dbpath-key', 'dbpath-dim', 1, 3, Date.now())
  flushQuotaWrites()
  const row = host.prepare("SELECT consumed FROM quota_consumption WHERE api_key_id = 'dbpath-key'").get()
  assert.equal(row?.consumed, 3, 'the engine still writes the installed file')
})

test('a choice in flight is shared: 20 concurrent getQuotaStore with Redis down ping once and warn once', { timeout: 20_000 }, async () => {
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = 'redis://127.0.0.1:1'
  try {
    resetQuotaStoreSingleton()
    const before = warnings.length
    const stores = await Promise.all(Array.from({ length: 20 }, () => getQuotaStore()))
    assert.ok(stores.every((s) => s === getSqliteQuotaStore()))
    const said = warnings.slice(before).filter((w) => w.component === 'quota:factory')
    assert.equal(said.length, 1, JSON.stringify(said))
    assert.match(said[0].msg, /Redis quota store unavailable at redis:\/\/127\.0\.0\.1:1; falling back to SQLite/)
  } finally {
    delete process.env.QUOTA_STORE_DRIVER
    delete process.env.QUOTA_STORE_REDIS_URL
    resetQuotaStoreSingleton()
  }
})

test('getQuotaStoreSync throws until getQuotaStore resolved, even when the hot path chose already', async () => {
  const { getQuotaStoreSync } = await import('@omniroute/quota-engine')
  resetQuotaStoreSingleton()
  await enforceQuotaShare({ apiKeyId: 'sync-key', connectionId: 'sync-conn', provider: 'kimi' })
  assert.throws(() => getQuotaStoreSync(), /before getQuotaStore\(\) resolved/)
  const store = await getQuotaStore()
  assert.equal(getQuotaStoreSync(), store)
})

test('a setting that is not JSON is warned about and the environment decides', async () => {
  host.prepare("INSERT OR REPLACE INTO key_value (namespace, key, value) VALUES ('settings', 'quotaStore', ?)").run('{not json')
  try {
    resetQuotaStoreSingleton()
    const before = warnings.length
    assert.equal(await getQuotaStore(), getSqliteQuotaStore())
    const said = warnings.slice(before).filter((w) => w.component === 'quota:factory')
    assert.equal(said.length, 1)
    assert.match(said[0].msg, /could not read the quotaStore setting; using the environment/)
    assert.ok(said[0].error, 'the parse error is named')
  } finally {
    setSetting(null)
    resetQuotaStoreSingleton()
  }
})

test('failures the glue catches fail open once per fault and are counted', async () => {
  const { metrics } = await import('@omniroute/quota-engine')
  const failOpens = () => Number(/^quota_engine_fail_open_total (\d+)/m.exec(metrics())[1])
  const before = failOpens()
  const warned = warnings.length
  const hostile = { get apiKeyId() { throw new Error('hostile getter') }, connectionId: 'c', provider: 'p' }
  for (let i = 0; i < 3; i++) assert.deepEqual(await enforceQuotaShare(hostile), { kind: 'allow' })
  assert.equal(failOpens() - before, 3)
  const said = warnings.slice(warned).filter((w) => /quota enforcement failed/.test(w.msg))
  assert.equal(said.length, 1)
  assert.match(said[0].error, /hostile getter/)
})

test('a worker that calls installHost without a dbPath keeps the process on the installed file', async () => {
  const { Worker } = await import('node:worker_threads')
  const { createRequire } = await import('node:module')
  const entry = createRequire(import.meta.url).resolve('@omniroute/quota-engine')
  installHost({ dbPath, logger })
  const source = `
    const { parentPort, workerData } = require('node:worker_threads')
    require(workerData.entry).installHost({ logger: { warn() {}, info() {}, debug() {} } })
    parentPort.postMessage('installed')
  `
  await new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData: { entry } })
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  closeQuotaDb()
  getBucket('k', 'd', 1) // reopens
  const bucket = Math.floor(Date.now() / 3_600_000)
  host.prepare('INSERT OR REPLACE INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?, ?, ?, ?, ?)').run('wk', 'd:requests:hourly', bucket, 5, Date.now())
  assert.equal(getBucket('wk', 'd:requests:hourly', bucket), 5, 'still the installed file')
})

test('the header fallback of getSaturation is kept for 30 s like a fetched value', async () => {
  const { getSaturation, storeRateLimitHeaders, _clearSaturationCache, _clearRateLimitHeaders } = await import('@omniroute/quota-engine')
  _clearSaturationCache()
  storeRateLimitHeaders('fallback-conn', 'openai', { 'x-ratelimit-limit-tokens': '1000', 'x-ratelimit-remaining-tokens': '250' })
  assert.equal(await getSaturation('fallback-conn', 'openai', { unit: 'tokens', window: 'hourly' }), 0.75)
  storeRateLimitHeaders('fallback-conn', 'openai', { 'x-ratelimit-limit-tokens': '1000', 'x-ratelimit-remaining-tokens': '900' })
  assert.equal(await getSaturation('fallback-conn', 'openai', { unit: 'tokens', window: 'hourly' }), 0.75)
  _clearSaturationCache()
  _clearRateLimitHeaders()
})
