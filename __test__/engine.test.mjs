// The one engine of the process: the driver is chosen by the host's setting and chosen
// again when that setting changes (getQuotaStore at once, the hot path within a second);
// a dbPath resolver that throws or returns a non-string is reported once per problem,
// naming the fallback; the engine's own counters (metrics) count the hot path.
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
  enforceQuotaShare,
  getBucket,
  getQuotaStore,
  getSqliteQuotaStore,
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
    assert.equal(await plain.get(redisKey), '1', 'the record went to Redis')
    assert.equal(getBucket('key-follow', dimensionKey, bucket), 1, 'not to SQLite')

    // Back to SQLite: the hot path alone notices, within about a second.
    setSetting(null)
    const started = Date.now()
    while ((await plain.get(redisKey)) !== null && Date.now() - started < 3000) {
      await plain.del(redisKey)
      await recordConsumption(request)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    await recordConsumption(request)
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

test('a dbPath resolver that throws or returns a non-string is reported once per problem, naming the fallback', () => {
  const before = warnings.length
  // The fallback of a resolver that fails: $DATA_DIR/storage.sqlite — here the same file.
  const savedDataDir = process.env.DATA_DIR
  process.env.DATA_DIR = dir
  const fallback = path.join(dir, 'storage.sqlite')
  installHost({ dbPath: () => fallback, logger })
  closeQuotaDb()
  getBucket('k', 'd', 1) // opens through the resolver
  for (const bad of [() => 42, () => 42, () => { throw new Error('boom') }, () => undefined]) {
    installHost({ dbPath: bad, logger })
    closeQuotaDb()
    assert.equal(getBucket('k', 'd', 1), 0)
  }
  const said = warnings.slice(before).filter((w) => w.component === 'quota:store').map((w) => w.msg)
  assert.equal(said.length, 3, said.join('\n'))
  assert.match(said[0], /returned a number instead of a string; using .*storage\.sqlite/)
  assert.match(said[1], /threw: .*boom/)
  assert.match(said[2], /returned undefined/)
  assert.ok(said.every((m) => m.includes(fallback)), 'the fallback is named')
  if (savedDataDir === undefined) delete process.env.DATA_DIR
  else process.env.DATA_DIR = savedDataDir
  installHost({ dbPath, logger })
  closeQuotaDb()
})
