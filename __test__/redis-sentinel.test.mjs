// Redis Sentinel (docs/redis.md#sentinel) against real servers started here: a primary, a
// replica and three `redis-server --sentinel` (quorum 2). The engine finds the primary
// through `redis+sentinel://…/mymaster`, follows a manual `SENTINEL FAILOVER` (the old
// primary, demoted, answers READONLY: the write goes to the new one), and a primary killed
// during a burst: every call settles within the timeout while the Sentinels fail over,
// the hot path allows (fails open), and the count on the new primary keeps every write
// acknowledged more than a second before the old one died (replication is asynchronous:
// the stated bound, docs/redis.md#sentinel).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import Redis from 'ioredis'
import { makeDataDir } from './support/store-env.mjs'
import { REDIS_SKIP, startSentinels, bulk } from './support/redis-server.mjs'
import { RedisQuotaStore, resetRedisClient } from '@omniroute/quota-engine/compat/redisQuotaStore'
import { getQuotaStore, resetQuotaStoreSingleton } from '@omniroute/quota-engine/compat/storeFactory'
import { enforceQuotaShare, recordConsumption } from '@omniroute/quota-engine/compat/enforce'
import {
  closeQuotaDb,
  createPool,
  installHost,
  registerSaturationFetcher,
  upsertProviderPlan,
} from '@omniroute/quota-engine'

const skip = REDIS_SKIP
makeDataDir('redis-sentinel')
const TIMEOUT_MS = 1000
// Generous: the machine running the tests may be busy; an unbounded call would hang.
const BOUND_MS = 3 * TIMEOUT_MS + 1500
const CONCURRENCY = 8
const warnings = []
const logger = { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} }
let ha
let store

before(async () => {
  if (skip) return
  process.env.QUOTA_STORE_REDIS_TIMEOUT_MS = String(TIMEOUT_MS)
  installHost({ logger })
  ha = await startSentinels()
  store = new RedisQuotaStore(ha.url)
})

after(async () => {
  delete process.env.QUOTA_STORE_REDIS_TIMEOUT_MS
  delete process.env.QUOTA_STORE_DRIVER
  delete process.env.QUOTA_STORE_REDIS_URL
  resetQuotaStoreSingleton()
  resetRedisClient()
  closeQuotaDb()
  await ha?.stop()
})

const dim = (poolId) => ({ poolId, unit: 'requests', window: 'hourly' })
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function waitFor(check, what, ms = 30_000) {
  const deadline = Date.now() + ms
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

/** The value of `apiKeyId`'s current bucket of `d` on the server at `port`. */
async function valueOn(port, apiKeyId, d) {
  const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
  try {
    const bucket = Math.floor(Date.now() / 3_600_000)
    return Number((await client.get(`omniroute:quota:${apiKeyId}:${d.poolId}:${d.unit}:${d.window}:${bucket}`)) ?? 0)
  } finally {
    client.disconnect()
  }
}

/** Whether the server at `port` is a replica now. */
async function isReplica(port) {
  return (await bulk(port, 'ROLE')).includes('slave')
}

test('the primary is found through the Sentinels; the counters land on it', { skip }, async () => {
  const d = dim('sentinel-basic')
  assert.equal(await store.consume('k', d, 2), 2)
  assert.equal(await store.peek('k', d), 2)
  assert.equal(await ha.primaryPort(), ha.primary.port)
  assert.equal(await valueOn(ha.primary.port, 'k', d), 2)
})

test('SENTINEL FAILOVER: once the old primary is demoted, writes go to the new one', { skip }, async () => {
  const d = dim('sentinel-manual')
  assert.equal(await store.consume('k', d, 1), 1)
  const before = await ha.primaryPort()
  const other = before === ha.primary.port ? ha.replica.port : ha.primary.port
  await waitFor(async () => (await valueOn(other, 'k', d)) === 1, 'the replica to catch up')
  assert.match(await bulk(ha.sentinels[0].port, `SENTINEL FAILOVER ${ha.master}`), /OK/)
  await waitFor(async () => (await ha.primaryPort()) === other, 'the Sentinels to name the new primary')
  await waitFor(() => isReplica(before), 'the old primary to be demoted')
  // The engine's connection still points at the old primary, now a replica. Either the
  // Sentinels closed it (CLIENT KILL on reconfiguration): the one write that finds it
  // closed fails (it may have been sent, so it is not sent again: docs/redis.md#sentinel);
  // or it is open and the write gets READONLY (nothing written), which is sent again to
  // the primary the Sentinels name now. The next write lands there in both cases.
  let failures = 0
  let total
  for (;;) {
    try {
      total = await store.consume('k', d, 1)
      break
    } catch (err) {
      assert.equal(err.code, 'ERR_QUOTA_REDIS_UNAVAILABLE', err.message)
      assert.ok(++failures <= 1, `a second failure: ${err.message}`)
    }
  }
  assert.equal(total, 2 + (await valueOn(other, 'k', d)) - 2, 'the reply is the new primary\'s count')
  assert.ok([2, 3].includes(await valueOn(other, 'k', d)), 'one write, or two when the failed one was applied')
})

test('a primary killed during a burst: bounded calls, fail-open hot path, nothing lost beyond the replication bound', { skip }, async () => {
  const pool = createPool({ connectionId: 'sentinel-conn', name: 'sentinel', allocations: [{ apiKeyId: 'hot', weight: 100, policy: 'hard' }] })
  upsertProviderPlan({ connectionId: 'sentinel-conn', provider: 'sentinel-prov', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1e9 }], source: 'manual' })
  registerSaturationFetcher('sentinel-prov', async () => 0.1)
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = ha.url
  resetQuotaStoreSingleton()
  assert.ok((await getQuotaStore()) instanceof RedisQuotaStore)

  const d = dim('sentinel-burst')
  const primaryPort = await ha.primaryPort()
  const victim = primaryPort === ha.primary.port ? ha.primary : ha.replica
  const survivor = victim === ha.primary ? ha.replica : ha.primary
  await waitFor(async () => !(await isReplica(primaryPort)) && (await bulk(survivor.port, 'INFO replication')).includes('master_link_status:up'), 'replication up')

  let acked = 0
  const ackedAt = []
  let failed = 0
  let slowest = 0
  let afterSwitch = 0
  let switched = false
  const hot = { decisions: 0, allows: 0, slowest: 0 }
  const timed = async (fn) => {
    const started = Date.now()
    try {
      return await fn()
    } finally {
      slowest = Math.max(slowest, Date.now() - started)
    }
  }
  const request = { apiKeyId: 'hot', connectionId: 'sentinel-conn', provider: 'sentinel-prov' }
  const worker = async () => {
    while (!switched || afterSwitch < 200) {
      try {
        await timed(() => store.consume('k', d, 1))
        acked++
        ackedAt.push(Date.now())
        if (switched) afterSwitch++
      } catch (err) {
        assert.equal(err.code, 'ERR_QUOTA_REDIS_UNAVAILABLE', err.message)
        failed++
        await sleep(5)
      }
    }
  }
  const hotWorker = async () => {
    while (!switched || afterSwitch < 200) {
      const started = Date.now()
      const decision = await enforceQuotaShare(request)
      await recordConsumption({ ...request, cost: { requests: 1 } }) // never rejects
      hot.slowest = Math.max(hot.slowest, Date.now() - started)
      hot.decisions++
      if (decision.kind === 'allow') hot.allows++
      await sleep(1)
    }
  }
  const burst = Promise.all([...Array.from({ length: CONCURRENCY }, worker), hotWorker()])
  await waitFor(async () => acked > 300, 'the burst to start')
  await sleep(2 * 1000) // so that writes older than the bound exist when the primary dies
  await victim.kill('SIGKILL')
  const killedAt = Date.now()
  await waitFor(async () => (await ha.primaryPort()) === survivor.port && !(await isReplica(survivor.port)), 'the failover', 60_000)
  switched = true
  await burst
  const failoverMs = Date.now() - killedAt

  const value = await valueOn(survivor.port, 'k', d)
  // Replication is asynchronous: what the replica had not received when the primary died
  // is lost. The bound stated in docs/redis.md#sentinel: the writes acknowledged in the
  // last second before the crash (normally milliseconds of them; a second allows for a
  // busy machine starving the replica), plus the replies in flight at the kill.
  const LAG_MS = 1000
  const early = ackedAt.filter((t) => t < killedAt - LAG_MS).length
  const late = ackedAt.filter((t) => t >= killedAt).length
  const detail = `acked ${early} more than ${LAG_MS} ms before the kill, ${late} after it; acked ${acked}, failed ${failed}, on the new primary ${value}, slowest call ${slowest} ms, failover ${failoverMs} ms`
  // Nothing acknowledged is lost beyond that bound, and nothing is counted that was not
  // sent (a failed write may have been applied).
  assert.ok(value >= early + late - CONCURRENCY, detail)
  assert.ok(value <= acked + failed, detail)
  assert.ok(slowest <= BOUND_MS, detail)
  assert.ok(hot.slowest <= 2 * BOUND_MS, `hot path: slowest ${hot.slowest} ms`)
  assert.equal(hot.allows, hot.decisions, 'every decision allowed (failing open while the primary is gone)')
  assert.ok(warnings.some((w) => w.component === 'quota:enforce' || /quota:enforce/.test(JSON.stringify(w))), JSON.stringify(warnings))
  process.stderr.write(`# sentinel failover: ${detail}; hot path: ${hot.decisions} decisions, slowest ${hot.slowest} ms\n`)
  assert.ok(pool.id)
})
