// Redis write-behind and this process's own reads (docs/redis.md#write-behind): an enforce
// adds the buffered records to what Redis holds, each exactly once — also while a flush of
// them is out (applied by Redis, its answer not yet handled). Flushes run every 3 ms here,
// so many land during the enforces; a record counted twice would block at 60 of 100.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import Redis from 'ioredis'
import { openHost } from './support/store-env.mjs'
import { REDIS_SKIP, startRedis } from './support/redis-server.mjs'
import { enforceQuotaShare, recordConsumption } from '@omniroute/quota-engine/compat/enforce'
import { installHost } from '@omniroute/quota-engine/compat/host'
import { getQuotaStore, resetQuotaStoreSingleton } from '@omniroute/quota-engine/compat/storeFactory'
import { RedisQuotaStore, resetRedisClient } from '@omniroute/quota-engine/compat/redisQuotaStore'
import { closeQuotaDb, createPool, flushQuotaWrites, WINDOW_MS } from '@omniroute/quota-engine'

const skip = REDIS_SKIP
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-wb-reads-'))
const dbPath = path.join(dir, 'storage.sqlite')
const HOUR = WINDOW_MS.hourly
const warnings = []
const logger = { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} }
let server
let plain
let host

before(async () => {
  if (skip) return
  server = await startRedis()
  plain = new Redis(server.url, { maxRetriesPerRequest: 1 })
  installHost({ dbPath, logger, saturationFetchers: { wb: async () => 0 } })
  createPool({ connectionId: 'bootstrap', name: 'bootstrap' })
  host = openHost(dbPath)
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = server.url
  process.env.QUOTA_RECORD_FLUSH_MS = '3'
  resetQuotaStoreSingleton()
  assert.ok((await getQuotaStore()) instanceof RedisQuotaStore)
})

after(async () => {
  delete process.env.QUOTA_STORE_DRIVER
  delete process.env.QUOTA_STORE_REDIS_URL
  delete process.env.QUOTA_RECORD_FLUSH_MS
  resetQuotaStoreSingleton()
  resetRedisClient()
  plain?.disconnect()
  host?.close()
  closeQuotaDb()
  await server?.stop()
  fs.rmSync(dir, { recursive: true, force: true })
})

let seq = 0
function hostPool(key, limit) {
  const id = `rvpool-${++seq}-${process.pid}`
  const connection = `rvconn-${seq}`
  host.prepare('INSERT INTO quota_pools (id, connection_id, name, group_id) VALUES (?, ?, ?, ?)').run(id, connection, id, null)
  host.prepare('INSERT INTO quota_pool_connections (pool_id, connection_id, created_at) VALUES (?, ?, ?)').run(id, connection, 1000)
  host.prepare('INSERT INTO quota_allocations (pool_id, api_key_id, weight, cap_value, cap_unit, policy) VALUES (?, ?, ?, ?, ?, ?)').run(id, key, 100, null, null, 'hard')
  host.prepare("INSERT OR REPLACE INTO provider_plans (connection_id, provider, dimensions_json, source, updated_at) VALUES (?, ?, ?, 'manual', ?)").run(connection, 'wb', JSON.stringify([{ unit: 'requests', window: 'hourly', limit }]), Date.now())
  return { id, connection }
}

async function rounds(tag) {
  const blocks = []
  for (let round = 0; round < 40; round++) {
    const key = `rv-${tag}-${round}`
    const { id, connection } = hostPool(key, 100)
    await enforceQuotaShare({ apiKeyId: key, connectionId: connection, provider: 'wb' })
    for (let i = 0; i < 60; i++) recordConsumption({ apiKeyId: key, connectionId: connection, provider: 'wb', cost: {} })
    const started = Date.now()
    while (Date.now() - started < 30) {
      const answers = await Promise.all(Array.from({ length: 8 }, () => enforceQuotaShare({ apiKeyId: key, connectionId: connection, provider: 'wb' })))
      for (const a of answers) if (a.kind !== 'allow') blocks.push({ round, ...a })
    }
    flushQuotaWrites()
    assert.equal(await plain.get(`omniroute:quota:${key}:${id}:requests:hourly:${Math.floor(Date.now() / HOUR)}`), '60', 'Redis holds exactly 60')
  }
  return blocks
}

test('60 of 100 requests used: no enforce blocks while the flush of those 60 is out', { skip }, async () => {
  const blocks = [...(await rounds('a')), ...(await rounds('b'))]
  assert.deepEqual(blocks, [], `${blocks.length} blocks, first ${JSON.stringify(blocks[0])}`)
})

// Control, run second (its 60 s timer stays armed and would stop the timer flushes above).
test('control: flush window 60 s (no flush out during the enforces): never blocks', { skip }, async () => {
  process.env.QUOTA_RECORD_FLUSH_MS = '60000'
  try {
    assert.deepEqual(await rounds('control'), [])
  } finally {
    process.env.QUOTA_RECORD_FLUSH_MS = '3'
  }
})

