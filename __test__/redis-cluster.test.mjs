// The Redis driver on a Redis Cluster (opt-in): three `redis-server --cluster-enabled yes`
// nodes joined by `redis-cli --cluster create`, started here. The shared store suite runs
// on it, every key of a pool carries the pool's hash tag (so each script's keys share a
// slot), and the hot path works end to end.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { makeDataDir } from './support/store-env.mjs'
import { storeSuite } from './support/store-suite.mjs'
import { REDIS_SKIP, startCluster, rawCommand } from './support/redis-server.mjs'
import { RedisQuotaStore, getRedisClient, resetRedisClient } from '@omniroute/quota-engine/compat/redisQuotaStore'
import { getQuotaStore, resetQuotaStoreSingleton } from '@omniroute/quota-engine/compat/storeFactory'
import { enforceQuotaShare, recordConsumption } from '@omniroute/quota-engine/compat/enforce'

makeDataDir('redis-cluster')
const require = createRequire(import.meta.url)
const native = require('../binding.js')
const { StoreDriver } = require('../lib/stores.js')
const { closeQuotaDb, createPool, upsertProviderPlan } = require('@omniroute/quota-engine')
const skip = REDIS_SKIP
let cluster

before(async () => {
  if (!skip) cluster = await startCluster()
})

after(async () => {
  resetRedisClient()
  resetQuotaStoreSingleton()
  closeQuotaDb()
  await cluster?.stop()
})

/** Every key on every node (a test-sized keyspace). */
async function allKeys() {
  const keys = []
  for (const node of cluster.nodes) {
    const reply = await rawCommand(node.port, 'KEYS *')
    // RESP array: *N, then $len / value pairs.
    const lines = reply.split('\r\n')
    for (let i = 1; i < lines.length; i++) if (!lines[i].startsWith('$') && lines[i] !== '') keys.push({ node: node.port, key: lines[i] })
  }
  return keys
}

async function dbsize() {
  let total = 0
  for (const node of cluster.nodes) total += Number((await rawCommand(node.port, 'DBSIZE')).slice(1))
  return total
}

storeSuite(
  'redis-cluster',
  () => ({
    store: new RedisQuotaStore(cluster.url),
    at: {
      consume: (apiKeyId, dim, cost, nowMs) => new StoreDriver(cluster.url).consume(apiKeyId, dim, cost, nowMs),
      peek: (apiKeyId, dim, nowMs) => new StoreDriver(cluster.url).peek(apiKeyId, dim, nowMs),
      poolConsumedTotal: (dim, nowMs) => new StoreDriver(cluster.url).poolConsumedTotal(dim, nowMs),
    },
    countWrites: dbsize,
  }),
  { skip },
)

test('cluster keys carry the pool hash tag, so every key of a pool lives on one node', { skip }, async () => {
  const store = new RedisQuotaStore(cluster.url)
  const pools = ['tag-a', 'tag-b', 'tag-c', 'tag-d', 'tag-e', 'tag-f']
  for (const pool of pools) {
    for (const key of ['k1', 'k2', 'k3']) {
      await store.consume(key, { poolId: pool, unit: 'tokens', window: 'daily' }, 1)
      await store.consume(key, { poolId: `${pool}:model:m`, unit: 'requests', window: 'hourly' }, 1)
    }
  }
  const keys = await allKeys()
  const nodesUsed = new Set()
  for (const pool of pools) {
    const mine = keys.filter((k) => k.key.includes(`{${pool}}`))
    assert.equal(mine.length, 3 * 2 + 2 + 2, `${pool}: 6 buckets, 2 members sets and 2 bucket totals`)
    assert.ok(mine.some((k) => k.key === `omniroute:quota-total:{${pool}}:${pool}:tokens:daily:${Math.floor(Date.now() / 86_400_000)}`), JSON.stringify(mine))
    assert.ok(mine.some((k) => k.key === `omniroute:quota:{${pool}}:k1:${pool}:tokens:daily:${Math.floor(Date.now() / 86_400_000)}`), JSON.stringify(mine))
    assert.ok(mine.some((k) => k.key === `omniroute:quota-members:{${pool}}:${pool}:model:m:requests:hourly:${Math.floor(Date.now() / 3_600_000)}`))
    assert.equal(new Set(mine.map((k) => k.node)).size, 1, `${pool} is on one node`)
    nodesUsed.add(mine[0].node)
  }
  assert.ok(nodesUsed.size > 1, 'pools spread over the cluster')
  const client = await getRedisClient(cluster.url)
  assert.equal(await client.ping(), 'PONG')
})

test('QUOTA_STORE_REDIS_CLUSTER switches a redis:// URL to the cluster layout', { skip }, async () => {
  process.env.QUOTA_STORE_REDIS_CLUSTER = 'true'
  try {
    const url = `redis://127.0.0.1:${cluster.nodes[1].port}/0`
    const info = native.redisTarget(url)
    assert.equal(info.cluster, true)
    const store = new RedisQuotaStore(url)
    assert.equal(await store.consume('sw', { poolId: 'switched', unit: 'usd', window: 'daily' }, 2.5), 2.5)
    assert.ok((await allKeys()).some((k) => k.key.startsWith('omniroute:quota:{switched}:sw:switched:usd:daily:')))
  } finally {
    delete process.env.QUOTA_STORE_REDIS_CLUSTER
  }
})

test('the hot path on a cluster: the factory picks it, record writes, enforce blocks at the ceiling', { skip }, async () => {
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = cluster.url
  resetQuotaStoreSingleton()
  try {
    assert.ok((await getQuotaStore()) instanceof RedisQuotaStore)
    const pool = createPool({ connectionId: 'cluster-conn', name: 'cluster-pool', allocations: [
      { apiKeyId: 'c1', weight: 50, policy: 'hard' },
      { apiKeyId: 'c2', weight: 50, policy: 'hard' },
    ] })
    upsertProviderPlan({ connectionId: 'cluster-conn', provider: 'acme', dimensions: [{ unit: 'requests', window: 'hourly', limit: 4 }], source: 'manual' })
    const input = (apiKeyId) => ({ apiKeyId, connectionId: 'cluster-conn', provider: 'acme' })
    for (let i = 0; i < 2; i++) await recordConsumption({ ...input('c1'), cost: {} })
    assert.deepEqual(await enforceQuotaShare(input('c2')), { kind: 'allow', deprioritize: false })
    for (let i = 0; i < 2; i++) await recordConsumption({ ...input('c2'), cost: {} })
    const blocked = await enforceQuotaShare(input('c1'))
    assert.equal(blocked.kind, 'block')
    assert.equal(blocked.reason, 'Provider acme quota window is saturated; no shared capacity available')
    const store = await getQuotaStore()
    assert.equal(await store.poolConsumedTotal(pool.id, { poolId: pool.id, unit: 'requests', window: 'hourly' }), 4)
  } finally {
    delete process.env.QUOTA_STORE_DRIVER
    delete process.env.QUOTA_STORE_REDIS_URL
    resetQuotaStoreSingleton()
  }
})

test('a flush to one node that does not answer holds back no other pool: each counted once when it is back', { skip, timeout: 30_000 }, async () => {
  const { flushQuotaWrites, WINDOW_MS } = require('@omniroute/quota-engine')
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = cluster.url
  process.env.QUOTA_RECORD_FLUSH_MS = '60000'
  resetQuotaStoreSingleton()
  try {
    await getQuotaStore()
    const pools = []
    for (let i = 0; i < 8; i++) {
      const connection = `held-conn-${i}`
      const pool = createPool({ connectionId: connection, name: `held-${i}`, allocations: [{ apiKeyId: 'h', weight: 100, policy: 'hard' }] })
      upsertProviderPlan({ connectionId: connection, provider: 'held', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1e9 }], source: 'manual' })
      // The node that owns the pool's slot answers instead of redirecting.
      let node
      for (const n of cluster.nodes) if (!(await rawCommand(n.port, `GET {${pool.id}}x`)).startsWith('-MOVED')) node = n
      pools.push({ id: pool.id, connection, node })
    }
    const a = pools[0]
    const b = pools.find((p) => p.node !== a.node)
    const record = (p) => recordConsumption({ apiKeyId: 'h', connectionId: p.connection, provider: 'held', cost: {} })
    const counted = async (p) => {
      const reply = await rawCommand(p.node.port, `GET omniroute:quota:{${p.id}}:h:${p.id}:requests:hourly:${Math.floor(Date.now() / WINDOW_MS.hourly)}`)
      return reply.startsWith('$-1') ? 0 : Number(reply.split('\r\n')[1])
    }
    await record(a)
    await record(b)
    assert.equal(flushQuotaWrites(), null)
    const paused = Date.now()
    await rawCommand(a.node.port, 'CLIENT PAUSE 5000 ALL')
    await record(a)
    assert.notEqual(flushQuotaWrites(), null, "a's flush times out and is kept")
    await record(b)
    // a's kept flush goes first and times out again; b's goes all the same.
    assert.notEqual(flushQuotaWrites(), null)
    assert.equal(await counted(b), 2)
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, paused + 5300 - Date.now())))
    assert.equal(flushQuotaWrites(), null)
    assert.equal(native.pendingQuotaWrites(), 0)
    assert.equal(await counted(a), 2, 'sent three times, counted once')
  } finally {
    delete process.env.QUOTA_STORE_DRIVER
    delete process.env.QUOTA_STORE_REDIS_URL
    delete process.env.QUOTA_RECORD_FLUSH_MS
    resetQuotaStoreSingleton()
  }
})
