// enforceQuotaShare / recordConsumption (docs/contract.md §7) on the Redis driver, end to end:
// chosen by the factory, pools and plans written by the "host" through its own SQLite
// connection, counters on a real redis-server — some of them written by a plain client in
// the host's TypeScript driver's format (a mixed fleet) — and fail-open while the server
// is down.
import { test, beforeEach } from 'node:test'
import assert from 'node:assert/strict'
import { REDIS_SKIP } from './support/redis-server.mjs'
import { useRedisEngine, server, plain, host, warnings } from './support/redis-engine.mjs'
import { enforceQuotaShare, recordConsumption } from '@omniroute/quota-engine/compat/enforce'
import { getBucket } from '@omniroute/quota-engine/compat/quotaConsumption'
import { _clearSaturationCache } from '@omniroute/quota-engine/compat/saturationSignals'
import { flushQuotaWrites, WINDOW_MS } from '@omniroute/quota-engine'

const skip = REDIS_SKIP
const HOUR = WINDOW_MS.hourly
const events = []
const { install } = useRedisEngine('redis-enforce', {
  host: { onQuotaEvent: (event, payload) => events.push({ event, payload }) },
})

beforeEach(() => {
  events.length = 0
  warnings.length = 0
  _clearSaturationCache()
})

let seq = 0
function hostPool(allocations, connections = [`conn-${++seq}`]) {
  const id = `rpool-${seq}-${process.pid}`
  host.prepare('INSERT INTO quota_pools (id, connection_id, name, group_id) VALUES (?, ?, ?, ?)').run(id, connections[0], id, null)
  for (const [i, c] of connections.entries()) host.prepare('INSERT INTO quota_pool_connections (pool_id, connection_id, created_at) VALUES (?, ?, ?)').run(id, c, 1000 + i)
  for (const a of allocations) {
    host.prepare('INSERT INTO quota_allocations (pool_id, api_key_id, weight, cap_value, cap_unit, policy) VALUES (?, ?, ?, ?, ?, ?)').run(id, a.key, a.weight, a.capValue ?? null, a.capUnit ?? null, a.policy ?? 'hard')
  }
  return { id, connection: connections[0] }
}

function hostPlan(connectionId, provider, dimensions) {
  host.prepare("INSERT OR REPLACE INTO provider_plans (connection_id, provider, dimensions_json, source, updated_at) VALUES (?, ?, ?, 'manual', ?)").run(connectionId, provider, JSON.stringify(dimensions), Date.now())
}

/** The host's TypeScript driver's consume: INCRBYFLOAT + EXPIREs at the documented key. */
async function legacyConsume(apiKeyId, dimensionKey, amount, windowMs = HOUR, bucketOffset = 0) {
  const bucket = Math.floor(Date.now() / windowMs) + bucketOffset
  const key = `omniroute:quota:${apiKeyId}:${dimensionKey}:${bucket}`
  await plain.incrbyfloat(key, amount)
  await plain.expire(key, Math.ceil((2 * windowMs) / 1000))
}

/**
 * How much to put in the previous hourly bucket so that it alone weighs `weight` now (its
 * weight decays over the hour); near the hour's end, waits for the next hour first so the
 * bucket does not turn between writing and reading.
 */
async function previousFor(weight) {
  const left = HOUR - (Date.now() % HOUR)
  if (left < 5000) await new Promise((resolve) => setTimeout(resolve, left + 10))
  return weight / (1 - (Date.now() % HOUR) / HOUR)
}

test('recordConsumption writes every plan dimension to Redis (not SQLite) in the host\'s format', { skip }, async () => {
  await previousFor(0) // clear of the hour's end
  const { id, connection } = hostPool([{ key: 'rec', weight: 100 }])
  hostPlan(connection, 'mixed', [{ unit: 'tokens', window: 'hourly', limit: 1e6 }, { unit: 'usd', window: 'daily', limit: 100 }, { unit: 'requests', window: 'hourly', limit: 100 }, { unit: 'percent', window: '5h', limit: 100 }])
  host.prepare('INSERT INTO quota_allocation_model_caps (pool_id, api_key_id, model, cap_value, cap_unit) VALUES (?, ?, ?, ?, ?)').run(id, 'rec', 'm1', 1000, 'tokens')
  await recordConsumption({ apiKeyId: 'rec', connectionId: connection, provider: 'mixed', model: 'm1', cost: { tokens: 120, usd: 0.25 } })
  await recordConsumption({ apiKeyId: 'rec', connectionId: connection, provider: 'mixed', cost: { tokens: 0, usd: 0, requests: 0 } })
  assert.equal(flushQuotaWrites(), null) // write-behind (docs/redis.md#write-behind): sent now
  const hour = Math.floor(Date.now() / HOUR)
  const day = Math.floor(Date.now() / 86_400_000)
  assert.deepEqual(
    await plain.mget(
      `omniroute:quota:rec:${id}:tokens:hourly:${hour}`,
      `omniroute:quota:rec:${id}:usd:daily:${day}`,
      `omniroute:quota:rec:${id}:requests:hourly:${hour}`,
      `omniroute:quota:rec:${id}:percent:5h:${Math.floor(Date.now() / 18_000_000)}`,
      `omniroute:quota:rec:${id}:model:m1:tokens:hourly:${hour}`,
    ),
    ['120', '0.25', '1', null, '120'],
  )
  assert.equal(getBucket('rec', `${id}:tokens:hourly`, hour), 0, 'SQLite counters untouched')
})

test('mixed fleet: enforce sees counters an old replica wrote, and blocks at the pool ceiling', { skip }, async () => {
  const { id, connection } = hostPool([{ key: 'new', weight: 50, policy: 'burst' }, { key: 'old', weight: 50 }])
  hostPlan(connection, 'acme', [{ unit: 'requests', window: 'hourly', limit: 10 }])
  install({ saturationFetchers: { acme: async () => 0 } })
  await legacyConsume('old', `${id}:requests:hourly`, 6)
  for (let i = 0; i < 3; i++) await recordConsumption({ apiKeyId: 'new', connectionId: connection, provider: 'acme', cost: {} })
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'new', connectionId: connection, provider: 'acme' }), { kind: 'allow', deprioritize: false })
  await legacyConsume('old', `${id}:requests:hourly`, 1)
  // Another client's write reaches this process as an invalidation, a round trip or so later
  // (docs/redis.md#the-counter-view): the decisions until then are the view's.
  let blocked
  const deadline = Date.now() + 1000
  do blocked = await enforceQuotaShare({ apiKeyId: 'new', connectionId: connection, provider: 'acme' })
  while (blocked.kind === 'allow' && Date.now() < deadline)
  assert.deepEqual(blocked, { kind: 'block', reason: 'Provider acme quota window is saturated; no shared capacity available', httpStatus: 429 })
  assert.deepEqual(events, [{ event: 'quota.exceeded', payload: { apiKeyId: 'new', provider: 'acme', connectionId: connection, reason: 'global-saturated' } }])
  install()
})

test('strict mode on Redis: a hard key over its share is blocked with retryAfterSeconds from the previous bucket', { skip }, async () => {
  const { id, connection } = hostPool([{ key: 'greedy', weight: 50 }, { key: 'quiet', weight: 50 }])
  hostPlan(connection, 'busy', [{ unit: 'requests', window: 'hourly', limit: 100 }])
  install({ saturationFetchers: { busy: async () => 0.9 } })
  // greedy: 30 (the previous bucket, decayed) + 40 = 70 ≥ its share of 50, under the pool's 100.
  await legacyConsume('greedy', `${id}:requests:hourly`, await previousFor(30), HOUR, -1)
  await legacyConsume('greedy', `${id}:requests:hourly`, 40)
  const result = await enforceQuotaShare({ apiKeyId: 'greedy', connectionId: connection, provider: 'busy' })
  assert.equal(result.kind, 'block')
  assert.equal(result.reason, 'Quota share limit reached for your API key on busy')
  assert.ok(Number.isInteger(result.retryAfterSeconds) && result.retryAfterSeconds >= 1, JSON.stringify(result))
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'quiet', connectionId: connection, provider: 'busy' }), { kind: 'allow', deprioritize: false })
  install()
})

test('the model cap on Redis: its own hourly bucket, the exact message, the event with the model', { skip }, async () => {
  const { id, connection } = hostPool([{ key: 'capped', weight: 100 }])
  host.prepare('INSERT INTO quota_allocation_model_caps (pool_id, api_key_id, model, cap_value, cap_unit) VALUES (?, ?, ?, ?, ?)').run(id, 'capped', 'kimi-k2', 3, 'requests')
  for (let i = 0; i < 3; i++) await recordConsumption({ apiKeyId: 'capped', connectionId: connection, provider: 'kimi', model: 'kimi-k2', cost: {} })
  const result = await enforceQuotaShare({ apiKeyId: 'capped', connectionId: connection, provider: 'kimi', model: 'kimi-k2' })
  assert.equal(result.reason, 'Model cap reached for your API key on kimi/kimi-k2 [model-cap]')
  assert.deepEqual(events[0].payload, { apiKeyId: 'capped', provider: 'kimi', connectionId: connection, reason: 'model-cap', model: 'kimi-k2' })
  assert.equal((await enforceQuotaShare({ apiKeyId: 'capped', connectionId: connection, provider: 'kimi', model: 'other' })).kind, 'allow')
})

test('Redis down: enforce fails open in bounded time with one warning, record never rejects, and both recover', { skip }, async () => {
  const { id, connection } = hostPool([{ key: 'down', weight: 100 }])
  hostPlan(connection, 'acme', [{ unit: 'requests', window: 'hourly', limit: 2 }])
  install({ saturationFetchers: { acme: async () => 0 } })
  await recordConsumption({ apiKeyId: 'down', connectionId: connection, provider: 'acme', cost: {} })
  await recordConsumption({ apiKeyId: 'down', connectionId: connection, provider: 'acme', cost: {} })
  assert.equal((await enforceQuotaShare({ apiKeyId: 'down', connectionId: connection, provider: 'acme' })).kind, 'block')
  assert.equal(flushQuotaWrites(), null) // sent, so the kill loses them (no persistence)
  await server.kill('SIGKILL')
  const started = Date.now()
  for (let i = 0; i < 5; i++) {
    assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'down', connectionId: connection, provider: 'acme' }), { kind: 'allow' })
    await recordConsumption({ apiKeyId: 'down', connectionId: connection, provider: 'acme', cost: {} })
  }
  assert.ok(Date.now() - started < 10_000, `took ${Date.now() - started} ms`)
  const enforceWarnings = warnings.filter((w) => w.component === 'quota:enforce' && /enforcement failed/.test(w.msg))
  assert.equal(enforceWarnings.length, 1, JSON.stringify(warnings))
  assert.match(enforceWarnings[0].error, /Redis/)
  // A key with no pool is decided from metadata alone: no Redis round trip, no warning.
  const earlier = warnings.splice(0)
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'stranger', connectionId: connection, provider: 'acme' }), { kind: 'allow' })
  assert.equal(warnings.length, 0)
  // The records made while it was down stayed buffered (docs/redis.md#write-behind): a
  // flush fails, keeps them and says so once.
  assert.match(flushQuotaWrites(), /Redis/)
  const kept = [...earlier, ...warnings].filter((w) => /stay buffered and are retried/.test(w.msg))
  assert.equal(kept.length, 1, JSON.stringify(warnings))
  await server.start()
  await recordConsumption({ apiKeyId: 'down', connectionId: connection, provider: 'acme', cost: {} })
  assert.equal(flushQuotaWrites(), null)
  // The server lost the two records before the kill (no persistence); the five made while
  // it was down and the one after arrive.
  assert.equal(await plain.get(`omniroute:quota:down:${id}:requests:hourly:${Math.floor(Date.now() / HOUR)}`), '6')
  // Enforcing again, from Redis: 6 over the limit of 2 (a fail-open allow has no deprioritize).
  assert.equal((await enforceQuotaShare({ apiKeyId: 'down', connectionId: connection, provider: 'acme' })).kind, 'block')
  install()
})
