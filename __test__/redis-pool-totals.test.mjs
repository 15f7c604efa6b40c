// Pool totals on Redis (docs/redis.md#pool-totals) against a real redis-server: the write
// scripts keep a total per dimension and bucket (`omniroute:quota-total:…`) in both modes;
// QUOTA_STORE_REDIS_POOL_TOTALS=aggregate reads it with two GETs whatever the pool's size
// (counted in the server's own INFO commandstats: no MGET at all), and it stays equal to
// the exact sum through consume, clear, reserve and settle. The default (exact) still
// counts what an old TypeScript replica wrote; aggregate does not, which is why it is not
// the default.
import { test, before, after, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import Redis from 'ioredis'
import { makeDataDir } from './support/store-env.mjs'
import { REDIS_SKIP, startRedis } from './support/redis-server.mjs'
import { RedisQuotaStore, resetRedisClient } from '@omniroute/quota-engine/compat/redisQuotaStore'
import { getQuotaStore, resetQuotaStoreSingleton } from '@omniroute/quota-engine/compat/storeFactory'
import { enforceQuotaShare, recordConsumption } from '@omniroute/quota-engine/compat/enforce'
import {
  WINDOW_MS,
  closeQuotaDb,
  createPool,
  installHost,
  registerSaturationFetcher,
  releaseReservation,
  upsertProviderPlan,
} from '@omniroute/quota-engine'

const skip = REDIS_SKIP
makeDataDir('redis-totals')
const require = createRequire(import.meta.url)
const { StoreDriver } = require('../lib/stores.js')
const HOUR = WINDOW_MS.hourly
let server
let plain

before(async () => {
  if (skip) return
  installHost({ logger: { warn() {}, info() {}, debug() {} } })
  server = await startRedis()
  plain = new Redis(server.url, { maxRetriesPerRequest: 1 })
})

afterEach(() => {
  delete process.env.QUOTA_STORE_REDIS_POOL_TOTALS
  delete process.env.QUOTA_ADMISSION
  resetRedisClient() // the next backend reads the mode again
})

after(async () => {
  delete process.env.QUOTA_STORE_DRIVER
  delete process.env.QUOTA_STORE_REDIS_URL
  resetQuotaStoreSingleton()
  plain?.disconnect()
  resetRedisClient()
  closeQuotaDb()
  await server?.stop()
})

/** The store in `mode` (a fresh backend: the mode is read when it is created). */
function storeIn(mode) {
  resetRedisClient()
  if (mode) process.env.QUOTA_STORE_REDIS_POOL_TOTALS = mode
  else delete process.env.QUOTA_STORE_REDIS_POOL_TOTALS
  return new RedisQuotaStore(server.url)
}

function pool(name, size) {
  const allocations = Array.from({ length: size }, (_, i) => ({ apiKeyId: `${name}-k${i}`, weight: 100 / size, policy: 'hard' }))
  return createPool({ connectionId: `${name}-conn`, name, allocations })
}

/** How many times the server ran `command`, scripts' calls included. */
async function calls(command) {
  const stats = await plain.info('commandstats')
  return Number((stats.match(new RegExp(`cmdstat_${command}:calls=(\\d+)`)) || [0, 0])[1])
}

async function awayFromHourEnd() {
  const left = HOUR - (Date.now() % HOUR)
  if (left < 10_000) await new Promise((resolve) => setTimeout(resolve, left + 10))
}

test('aggregate: the total equals the exact sum, read without one MGET however many keys', { skip }, async () => {
  await awayFromHourEnd()
  const p = pool('agg', 2000)
  const d = { poolId: p.id, unit: 'tokens', window: 'hourly' }
  const exact = storeIn('exact')
  let sum = 0
  for (let i = 0; i < 2000; i++) {
    await exact.consume(`agg-k${i}`, d, i % 7)
    sum += i % 7
  }
  await exact.consume('no-allocation', d, 0.5) // counted in both modes (the members set / the total)
  sum += 0.5
  assert.equal(await plain.get(`omniroute:quota-total:${p.id}:tokens:hourly:${Math.floor(Date.now() / HOUR)}`), String(sum))

  const mgetBefore = await calls('mget')
  assert.equal(await exact.poolConsumedTotal(p.id, d), sum)
  assert.ok((await calls('mget')) - mgetBefore >= 8, 'exact: 4 000 buckets read in MGETs of 512')

  const aggregate = storeIn('aggregate')
  const mget = await calls('mget')
  const get = await calls('get')
  assert.equal(await aggregate.poolConsumedTotal(p.id, d), sum)
  assert.equal((await calls('mget')) - mget, 0, 'aggregate: no bucket read')
  assert.equal((await calls('get')) - get, 2, 'aggregate: the two buckets\' totals')

  // clear takes the key's value out of the total.
  await aggregate.clear('agg-k6', d)
  assert.equal(await aggregate.poolConsumedTotal(p.id, d), sum - 6)
  assert.equal(await storeIn('exact').poolConsumedTotal(p.id, d), sum - 6)
})

test('aggregate: the previous bucket decays like the exact sum (injected time)', { skip }, async () => {
  storeIn('aggregate')
  const driver = new StoreDriver(server.url)
  const d = { poolId: 'agg-decay', unit: 'requests', window: 'hourly' }
  const t0 = 500 * HOUR + HOUR / 2
  await driver.consume('a', d, 10, t0)
  await driver.consume('b', d, 30, t0)
  assert.equal(await driver.poolConsumedTotal(d, t0), 40)
  const later = 501 * HOUR + HOUR / 4
  await driver.consume('a', d, 2, later)
  assert.equal(await driver.poolConsumedTotal(d, later), 2 + 40 * 0.75)
  resetRedisClient()
  delete process.env.QUOTA_STORE_REDIS_POOL_TOTALS
  assert.equal(await new StoreDriver(server.url).poolConsumedTotal(d, later), 2 + 40 * 0.75, 'exact agrees')
})

test('aggregate: reserve and settle keep the total equal to the exact sum', { skip }, async () => {
  await awayFromHourEnd()
  const p = pool('agg-reserve', 4)
  upsertProviderPlan({ connectionId: 'agg-reserve-conn', provider: 'aggprov', dimensions: [{ unit: 'tokens', window: 'hourly', limit: 1e9 }], source: 'manual' })
  registerSaturationFetcher('aggprov', async () => 0.9)
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = server.url
  process.env.QUOTA_ADMISSION = 'reserve'
  storeIn('aggregate')
  resetQuotaStoreSingleton()
  assert.ok((await getQuotaStore()) instanceof RedisQuotaStore)
  const d = { poolId: p.id, unit: 'tokens', window: 'hourly' }
  for (let i = 0; i < 8; i++) {
    const request = { apiKeyId: `agg-reserve-k${i % 4}`, connectionId: 'agg-reserve-conn', provider: 'aggprov' }
    const decision = await enforceQuotaShare({ ...request, estimatedTokens: 1000 })
    assert.equal(decision.kind, 'allow')
    assert.ok(decision.reservation, 'reserved')
    // Settled below, at and above the estimate; one released.
    if (i === 7) await releaseReservation(decision.reservation)
    else await recordConsumption({ ...request, cost: { tokens: [10, 1000, 2500][i % 3] }, reservation: decision.reservation })
  }
  const aggregate = await new RedisQuotaStore(server.url).poolConsumedTotal(p.id, d)
  const exact = await storeIn('exact').poolConsumedTotal(p.id, d)
  assert.equal(aggregate, exact)
  assert.ok(exact > 0)
})

test('mixed fleet: an old TypeScript replica\'s write counts in the exact default, not in aggregate', { skip }, async () => {
  await awayFromHourEnd()
  const p = pool('agg-mixed', 2)
  const d = { poolId: p.id, unit: 'tokens', window: 'hourly' }
  await storeIn().consume('agg-mixed-k0', d, 5) // the engine
  const bucket = Math.floor(Date.now() / HOUR)
  await plain.incrbyfloat(`omniroute:quota:agg-mixed-k1:${p.id}:tokens:hourly:${bucket}`, 7) // an old replica
  assert.equal(await storeIn().poolConsumedTotal(p.id, d), 12, 'the default is exact')
  assert.equal(await storeIn('exact').poolConsumedTotal(p.id, d), 12)
  assert.equal(await storeIn('aggregate').poolConsumedTotal(p.id, d), 5, 'aggregate misses what it did not write')
})
