// enforceQuotaShare / recordConsumption (docs/contract.md §7) through the host's import paths, on a
// real file, with pools, plans and caps written by a separate better-sqlite3 connection
// exactly as the host writes them.
import { test, before, after, beforeEach } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import Database from 'better-sqlite3'
import { enforceQuotaShare, recordConsumption } from '@omniroute/quota-engine/compat/enforce'
import { installHost } from '@omniroute/quota-engine/compat/host'
import { buildConsumptionCost, recordStreamingConsumption, scheduleRecordConsumption } from '@omniroute/quota-engine/compat/spendRecorder'
import { getQuotaStore, getQuotaStoreSync, resetQuotaStoreSingleton } from '@omniroute/quota-engine/compat/storeFactory'
import {
  _clearSaturationCache,
  getSaturation,
  storeRateLimitHeaders,
  getTokenHeaderSaturation,
  __setAnthropicSaturationDepsForTests,
  __setGenericUsageFetcherForTests,
} from '@omniroute/quota-engine/compat/saturationSignals'
import { isBucketSaturated } from '@omniroute/quota-engine/compat/accountBuckets'
import { resolvePlan } from '@omniroute/quota-engine/compat/planResolver'
import { getBucket } from '@omniroute/quota-engine/compat/quotaConsumption'
import { closeQuotaDb, softPenaltyFactor, getSqliteQuotaStore, createPool } from '@omniroute/quota-engine'
import { createRequire } from 'node:module'

const native = createRequire(import.meta.url)('../binding.js')

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-enforce-'))
const dbPath = path.join(dir, 'storage.sqlite')
let host
const events = []
const warnings = []
const logger = { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} }
const HOUR = 3_600_000

function install(extra = {}) {
  installHost({ dbPath, logger, onQuotaEvent: (event, payload) => events.push({ event, payload }), ...extra })
}

before(() => {
  install()
  // The engine creates the schema on first use; the host then writes through its own connection.
  createPool({ connectionId: 'bootstrap', name: 'bootstrap' })
  host = new Database(dbPath)
  host.pragma('journal_mode = WAL')
  host.pragma('busy_timeout = 2000')
  host.pragma('synchronous = NORMAL')
})

after(() => {
  host.close()
  closeQuotaDb()
  fs.rmSync(dir, { recursive: true, force: true })
})

beforeEach(() => {
  events.length = 0
  warnings.length = 0
  _clearSaturationCache()
})

let poolSeq = 0
/** A pool written by the host: `{ id, keys }`, members `connections`. */
function hostPool({ connections = ['conn'], allocations, legacy = false }) {
  const id = `pool-${++poolSeq}`
  host.prepare('INSERT INTO quota_pools (id, connection_id, name, group_id) VALUES (?, ?, ?, ?)').run(id, connections[0], id, null)
  if (!legacy) {
    for (const [i, c] of connections.entries()) host.prepare('INSERT INTO quota_pool_connections (pool_id, connection_id, created_at) VALUES (?, ?, ?)').run(id, c, 1000 + i)
  }
  for (const a of allocations) {
    host.prepare('INSERT INTO quota_allocations (pool_id, api_key_id, weight, cap_value, cap_unit, policy) VALUES (?, ?, ?, ?, ?, ?)').run(id, a.key, a.weight, a.capValue ?? null, a.capUnit ?? null, a.policy ?? 'hard')
  }
  return id
}

function hostPlan(connectionId, provider, dimensions) {
  host.prepare("INSERT OR REPLACE INTO provider_plans (connection_id, provider, dimensions_json, source, updated_at) VALUES (?, ?, ?, 'manual', ?)").run(connectionId, provider, JSON.stringify(dimensions), Date.now())
}

function hostConsume(key, dimensionKey, amount, windowMs = HOUR, bucketOffset = 0) {
  const bucket = Math.floor(Date.now() / windowMs) + bucketOffset
  host.prepare('INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (api_key_id, dimension_key, bucket_index) DO UPDATE SET consumed = consumed + excluded.consumed').run(key, dimensionKey, bucket, amount, Date.now())
}

let connSeq = 0
const conn = () => `conn-${++connSeq}`

test('a plan the host stored naming one unit and window twice: each request counted once, at the smaller limit', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'twice', weight: 100 }] })
  hostPlan(c, 'twicep', [{ unit: 'requests', window: 'hourly', limit: 10 }, { unit: 'requests', window: 'hourly', limit: 5 }])
  const request = { apiKeyId: 'twice', connectionId: c, provider: 'twicep' }
  let allowed = 0
  for (let i = 0; i < 8; i++) {
    if ((await enforceQuotaShare(request)).kind !== 'allow') continue
    allowed++
    await recordConsumption({ ...request, cost: {} })
  }
  assert.equal(allowed, 5)
  assert.equal(await getSqliteQuotaStore().peek('twice', { poolId: id, unit: 'requests', window: 'hourly' }), 5)
  assert.deepEqual(resolvePlan(c, 'twicep').dimensions, [{ unit: 'requests', window: 'hourly', limit: 5 }])
})

test('step 1: no allocation, or no pool on this connection → allow without deprioritize', async () => {
  const c = conn()
  hostPool({ connections: [c], allocations: [{ key: 'k1', weight: 50 }] })
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'stranger', connectionId: c, provider: 'kimi' }), { kind: 'allow' })
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'k1', connectionId: 'elsewhere', provider: 'kimi' }), { kind: 'allow' })
})

test('no request, or a request without ids → allow, not enforced, and nothing to warn about', async () => {
  for (const input of [undefined, null, {}, { apiKeyId: 'k1' }, { connectionId: 'c' }]) {
    assert.deepEqual(await enforceQuotaShare(input), { kind: 'allow' }, JSON.stringify(input))
  }
  assert.deepEqual(warnings, [])
})

test('step 1: a legacy pool (no membership rows) matches on its primary connection', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'legacy', weight: 100 }], legacy: true })
  hostConsume('legacy', `${id}:requests:hourly`, 1500)
  const result = await enforceQuotaShare({ apiKeyId: 'legacy', connectionId: c, provider: 'kimi' })
  assert.equal(result.kind, 'block')
})

test('step 1: a pool matches on any member connection, and the limit scales with members (step 4)', async () => {
  const [c1, c2] = [conn(), conn()]
  const id = hostPool({ connections: [c1, c2], allocations: [{ key: 'multi', weight: 100 }] })
  hostConsume('multi', `${id}:requests:hourly`, 2999)
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'multi', connectionId: c2, provider: 'kimi' }), { kind: 'allow', deprioritize: false })
  hostConsume('multi', `${id}:requests:hourly`, 1)
  const blocked = await enforceQuotaShare({ apiKeyId: 'multi', connectionId: c2, provider: 'kimi' })
  assert.equal(blocked.kind, 'block')
  assert.equal(blocked.reason, 'Provider kimi quota window is saturated; no shared capacity available')
  assert.equal(blocked.httpStatus, 429)
})

test('step 2: the model cap uses its own hourly bucket, blocks with the exact message, and emits the event with the model', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'capped', weight: 100 }] })
  host.prepare('INSERT INTO quota_allocation_model_caps (pool_id, api_key_id, model, cap_value, cap_unit) VALUES (?, ?, ?, ?, ?)').run(id, 'capped', 'kimi-k2', 3, 'requests')
  for (let i = 0; i < 3; i++) await recordConsumption({ apiKeyId: 'capped', connectionId: c, provider: 'kimi', model: 'kimi-k2', cost: {} })
  assert.equal(getBucket('capped', `${id}:model:kimi-k2:requests:hourly`, Math.floor(Date.now() / HOUR)), 3)
  const result = await enforceQuotaShare({ apiKeyId: 'capped', connectionId: c, provider: 'kimi', model: 'kimi-k2' })
  assert.equal(result.kind, 'block')
  assert.equal(result.reason, 'Model cap reached for your API key on kimi/kimi-k2 [model-cap]')
  assert.deepEqual(events, [{ event: 'quota.exceeded', payload: { apiKeyId: 'capped', provider: 'kimi', connectionId: c, reason: 'model-cap', model: 'kimi-k2' } }])
  // Another model, and no model at all, are not capped.
  assert.equal((await enforceQuotaShare({ apiKeyId: 'capped', connectionId: c, provider: 'kimi', model: 'other' })).kind, 'allow')
  assert.equal((await enforceQuotaShare({ apiKeyId: 'capped', connectionId: c, provider: 'kimi' })).kind, 'allow')
})

test('step 3: no plan dimensions, or only ε limits → allow', async () => {
  const c = conn()
  hostPool({ connections: [c], allocations: [{ key: 'free', weight: 100 }] })
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'free', connectionId: c, provider: 'openai' }), { kind: 'allow' })
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'free', connectionId: c, provider: 'glm' }), { kind: 'allow' })
})

test('step 3: a stored plan row overrides the catalog, seen on the very next call', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'planned', weight: 100 }] })
  hostConsume('planned', `${id}:requests:hourly`, 10)
  assert.equal((await enforceQuotaShare({ apiKeyId: 'planned', connectionId: c, provider: 'kimi' })).kind, 'allow')
  hostPlan(c, 'kimi', [{ unit: 'requests', window: 'hourly', limit: 10 }])
  assert.equal((await enforceQuotaShare({ apiKeyId: 'planned', connectionId: c, provider: 'kimi' })).kind, 'block')
  assert.deepEqual(resolvePlan(c, 'kimi'), { connectionId: c, provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit: 10 }], source: 'manual' })
})

test('resolvePlan never throws: a connectionId that is not a string has no stored plan, the provider still finds its catalog plan', () => {
  const kimi = { connectionId: null, provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1500 }], source: 'auto' }
  for (const connectionId of [null, undefined, 5, {}]) assert.deepEqual(resolvePlan(connectionId, 'kimi'), kimi, String(connectionId))
  assert.deepEqual(resolvePlan(conn(), 5), { connectionId: null, provider: '', dimensions: [], source: 'manual' })
})

test('steps 5–7: strict mode holds a hard key to its share, and emits the event', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'greedy', weight: 50 }, { key: 'quiet', weight: 50 }] })
  hostPlan(c, 'acme', [{ unit: 'requests', window: 'hourly', limit: 100 }])
  installHost({ dbPath, logger, onQuotaEvent: (event, payload) => events.push({ event, payload }), saturationFetchers: { acme: async () => 0.9 } })
  // The current bucket alone holds the fair share (50 of 100), whatever the time.
  hostConsume('greedy', `${id}:requests:hourly`, 50)
  const result = await enforceQuotaShare({ apiKeyId: 'greedy', connectionId: c, provider: 'acme' })
  assert.equal(result.kind, 'block')
  assert.equal(result.reason, 'Quota share limit reached for your API key on acme')
  assert.equal(result.httpStatus, 429)
  assert.deepEqual(events[0], { event: 'quota.exceeded', payload: { apiKeyId: 'greedy', provider: 'acme', connectionId: c, reason: 'fair-share' } })
  // The quiet key, under its share, passes.
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'quiet', connectionId: c, provider: 'acme' }), { kind: 'allow', deprioritize: false })
  install()
})

test('a block carries retryAfterSeconds: when the decay of the previous bucket clears it', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'waiter', weight: 50 }, { key: 'other', weight: 50 }] })
  hostPlan(c, 'later', [{ unit: 'requests', window: 'hourly', limit: 100 }])
  installHost({ dbPath, logger, saturationFetchers: { later: async () => 0.9 } })
  // The clock is injected through the native step: a quarter into a bucket, prev 80, curr 10:
  // 80 × 0.75 + 10 = 70 ≥ 50, and 80 × (1 − t) + 10 < 50 once t > 0.5, i.e. 15 min later.
  const bucket = Math.floor(Date.now() / HOUR)
  const nowMs = bucket * HOUR + HOUR / 4
  native.putSaturation('later', c, 'requests', 'hourly', 0.9, nowMs)
  const dimensionKey = `${id}:requests:hourly`
  const put = host.prepare('INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?, ?, ?, ?, ?)')
  put.run('waiter', dimensionKey, bucket - 1, 80, Date.now())
  put.run('waiter', dimensionKey, bucket, 10, Date.now())
  const step = native.enforce('waiter', c, 'later', undefined, undefined, undefined, undefined, undefined, nowMs)
  assert.equal(step.kind, 'block')
  assert.equal(step.code, 'fair-share')
  assert.equal(step.retryAfterSeconds, 15 * 60 + 1)
  install()
})

test('step 5: countable units use pool totals; percent units use saturation × limit', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'p1', weight: 50 }, { key: 'p2', weight: 50 }] })
  hostConsume('p2', `${id}:requests:hourly`, 1500)
  assert.equal((await enforceQuotaShare({ apiKeyId: 'p1', connectionId: c, provider: 'kimi' })).reason, 'Provider kimi quota window is saturated; no shared capacity available')
  const c2 = conn()
  hostPool({ connections: [c2], allocations: [{ key: 'p3', weight: 100 }] })
  installHost({ dbPath, logger, saturationFetchers: { codex: async () => 1 } })
  assert.equal((await enforceQuotaShare({ apiKeyId: 'p3', connectionId: c2, provider: 'codex' })).kind, 'block')
  _clearSaturationCache()
  installHost({ dbPath, logger, saturationFetchers: { codex: async () => 0.2 } })
  assert.equal((await enforceQuotaShare({ apiKeyId: 'p3', connectionId: c2, provider: 'codex' })).kind, 'allow')
  install()
})

test('step 6: when every weight is 0 each key counts as 100 / count', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'z1', weight: 0 }, { key: 'z2', weight: 0 }] })
  hostPlan(c, 'zero', [{ unit: 'tokens', window: 'hourly', limit: 1000 }])
  installHost({ dbPath, logger, saturationFetchers: { zero: async () => 1 } })
  hostConsume('z1', `${id}:tokens:hourly`, 499)
  assert.equal((await enforceQuotaShare({ apiKeyId: 'z1', connectionId: c, provider: 'zero' })).kind, 'allow')
  hostConsume('z1', `${id}:tokens:hourly`, 1)
  assert.equal((await enforceQuotaShare({ apiKeyId: 'z1', connectionId: c, provider: 'zero' })).reason, 'Quota share limit reached for your API key on zero')
  install()
})

test('step 7: a soft key over its share is deprioritized; cap-absolute has its own message', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'soft', weight: 10, policy: 'soft' }, { key: 'capkey', weight: 10, capValue: 2, capUnit: 'requests', policy: 'burst' }] })
  hostPlan(c, 'softy', [{ unit: 'requests', window: 'hourly', limit: 100 }])
  installHost({ dbPath, logger, saturationFetchers: { softy: async () => 0.8 } })
  hostConsume('soft', `${id}:requests:hourly`, 20)
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'soft', connectionId: c, provider: 'softy' }), { kind: 'allow', deprioritize: true })
  hostConsume('capkey', `${id}:requests:hourly`, 2)
  assert.equal((await enforceQuotaShare({ apiKeyId: 'capkey', connectionId: c, provider: 'softy' })).reason, 'Absolute quota cap reached for your API key on softy')
  install()
})

test('recordConsumption adds tokens/usd/requests per plan dimension, only when finite and > 0', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'rec', weight: 100 }] })
  hostPlan(c, 'mixed', [{ unit: 'tokens', window: 'hourly', limit: 1e6 }, { unit: 'usd', window: 'daily', limit: 100 }, { unit: 'requests', window: 'hourly', limit: 100 }, { unit: 'percent', window: '5h', limit: 100 }])
  await recordConsumption({ apiKeyId: 'rec', connectionId: c, provider: 'mixed', cost: { tokens: 120, usd: 0.25 } })
  await recordConsumption({ apiKeyId: 'rec', connectionId: c, provider: 'mixed', cost: { tokens: 0, usd: 0, requests: 0 } })
  // Absent counts 1 request; a number counts only when finite and > 0.
  for (const amount of [NaN, Infinity, -Infinity, '', 'abc', '1e400', '0x10', '0B11', '0o7']) {
    await recordConsumption({ apiKeyId: 'rec', connectionId: c, provider: 'mixed', cost: { tokens: amount, usd: amount, requests: amount } })
  }
  // A numeric string counts as the host's store counted it (its REAL column reads "100" as 100).
  await recordConsumption({ apiKeyId: 'rec', connectionId: c, provider: 'mixed', cost: { tokens: '100', usd: ' 0.5 ', requests: '2' } })
  const now = Date.now()
  assert.equal(getBucket('rec', `${id}:tokens:hourly`, Math.floor(now / HOUR)), 220)
  assert.equal(getBucket('rec', `${id}:usd:daily`, Math.floor(now / 86_400_000)), 0.75)
  assert.equal(getBucket('rec', `${id}:requests:hourly`, Math.floor(now / HOUR)), 3)
  assert.equal(getBucket('rec', `${id}:percent:5h`, Math.floor(now / 18_000_000)), 0)
})

test('ids of any length and script reach the engine whole: past the one-call read of short ids, and in multibyte text', async () => {
  for (const length of [251, 252, 255, 256, 4000]) {
    // 'é' is two bytes in UTF-8, '𝄞' four: every length lands a character on the read's edge.
    const key = `k-${'é'.repeat(length >> 2)}${'𝄞'.repeat(length >> 3)}`.slice(0, length)
    const c = `${conn()}-${'ß'.repeat(length >> 1)}`
    hostPool({ connections: [c], allocations: [{ key, weight: 100 }] })
    hostPlan(c, 'kimi', [{ unit: 'requests', window: 'hourly', limit: 2 }])
    for (let i = 0; i < 2; i++) {
      assert.equal((await enforceQuotaShare({ apiKeyId: key, connectionId: c, provider: 'kimi' })).kind, 'allow', `length ${length}`)
      await recordConsumption({ apiKeyId: key, connectionId: c, provider: 'kimi', cost: {} })
    }
    assert.equal((await enforceQuotaShare({ apiKeyId: key, connectionId: c, provider: 'kimi' })).kind, 'block', `length ${length}: the key and connection matched`)
  }
})

test('recordConsumption of tokens: Number.MAX_VALUE twice saturates at 1e15: nothing becomes Infinity, clear frees the pool', async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'whale', weight: 50, policy: 'soft' }, { key: 'minnow', weight: 50, policy: 'soft' }] })
  hostPlan(c, 'mixed', [{ unit: 'tokens', window: 'hourly', limit: 1e6 }])
  for (let i = 0; i < 2; i++) await recordConsumption({ apiKeyId: 'whale', connectionId: c, provider: 'mixed', cost: { tokens: Number.MAX_VALUE } })
  const store = getSqliteQuotaStore()
  const d = { poolId: id, unit: 'tokens', window: 'hourly' }
  assert.equal(getBucket('whale', `${id}:tokens:hourly`, Math.floor(Date.now() / HOUR)), 1e15)
  assert.equal(await store.poolConsumedTotal(id, d), 1e15)
  const stored = host.prepare('SELECT consumed FROM quota_consumption_totals WHERE dimension_key = ?').get(`${id}:tokens:hourly`)
  assert.equal(stored.consumed, 1e15)
  // clear used to fail (NOT NULL on the totals) and left every key blocked global-saturated.
  await store.clear('whale', d)
  assert.equal(await store.poolConsumedTotal(id, d), 0)
  assert.equal((await enforceQuotaShare({ apiKeyId: 'minnow', connectionId: c, provider: 'mixed' })).kind, 'allow')
})

test('fail-open: a store fault allows in bounded time and logs one warning; record never rejects', async () => {
  // Its folder is a file: no database can be opened there.
  fs.writeFileSync(path.join(dir, 'not-a-folder'), '')
  installHost({ dbPath: path.join(dir, 'not-a-folder', 'storage.sqlite'), logger })
  closeQuotaDb()
  const started = Date.now()
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'any', connectionId: 'any', provider: 'kimi' }), { kind: 'allow' })
  assert.ok(Date.now() - started < 3000)
  assert.equal(warnings.filter((w) => w.component === 'quota:enforce').length, 1)
  await recordConsumption({ apiKeyId: 'any', connectionId: 'any', provider: 'kimi', cost: {} })
  install()
  closeQuotaDb()
})

test('fail-open: a locked database still resolves allow in bounded time', async () => {
  const c = conn()
  hostPool({ connections: [c], allocations: [{ key: 'locked', weight: 100 }] })
  host.exec('BEGIN EXCLUSIVE')
  try {
    const started = Date.now()
    const result = await enforceQuotaShare({ apiKeyId: 'locked', connectionId: c, provider: 'kimi' })
    assert.equal(result.kind, 'allow')
    await recordConsumption({ apiKeyId: 'locked', connectionId: c, provider: 'kimi', cost: {} })
    assert.ok(Date.now() - started < 10_000)
  } finally {
    host.exec('COMMIT')
  }
})

test('fail-open: corrupt dimensions_json reads as no plan; a throwing fetcher counts as 0 and warns', async () => {
  const c = conn()
  hostPool({ connections: [c], allocations: [{ key: 'corrupt', weight: 100 }] })
  host.prepare("INSERT OR REPLACE INTO provider_plans (connection_id, provider, dimensions_json, source) VALUES (?, 'nope', '{not json', 'manual')").run(c)
  assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'corrupt', connectionId: c, provider: 'nope' }), { kind: 'allow' })
  installHost({ dbPath, logger, saturationFetchers: { '*': async () => { throw new Error('upstream down') } } })
  assert.equal(await getSaturation(c, 'kimi', { unit: 'requests', window: 'hourly' }), 0)
  assert.equal(warnings.filter((w) => w.component === 'quota:saturation').length, 1)
  install()
})

// Issue 15 item 2: fetchers are bounded, shared and, once warm, off the request path.
test('a saturation fetcher that never settles: enforce resolves with the fallback after QUOTA_SATURATION_FETCH_TIMEOUT_MS, warning once', { timeout: 10_000 }, async () => {
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'hung', weight: 50 }, { key: 'hung2', weight: 50 }] })
  hostPlan(c, 'hungp', [{ unit: 'requests', window: 'hourly', limit: 100 }])
  let calls = 0
  installHost({ dbPath, logger, saturationFetchers: { hungp: () => { calls++; return new Promise(() => {}) } } })
  process.env.QUOTA_SATURATION_FETCH_TIMEOUT_MS = '20'
  try {
    // The token headers are the fallback: 0.9 used → strict mode, and 'hung' is over its share.
    storeRateLimitHeaders(c, 'hungp', { 'x-ratelimit-limit-tokens': '1000', 'x-ratelimit-remaining-tokens': '100' })
    hostConsume('hung', `${id}:requests:hourly`, 60)
    const results = await Promise.all(Array.from({ length: 5 }, () => enforceQuotaShare({ apiKeyId: 'hung', connectionId: c, provider: 'hungp' })))
    assert.ok(results.every((r) => r.kind === 'block' && /Quota share limit/.test(r.reason)), JSON.stringify(results))
    assert.equal(calls, 1, 'one fetch for five concurrent requests')
    const said = warnings.filter((w) => w.component === 'quota:saturation')
    assert.equal(said.length, 1, JSON.stringify(said))
    assert.match(said[0].msg, /saturation fetch timed out; using the fallback/)
    assert.equal(said[0].connectionId, c)
    assert.equal(said[0].timeoutMs, 20)
  } finally {
    delete process.env.QUOTA_SATURATION_FETCH_TIMEOUT_MS
    install()
  }
})

test('a fetcher slower than the timeout: the requests waiting get the fallback, and its answer counts once it comes', { timeout: 10_000 }, async () => {
  const c = conn()
  let answer = 0.95
  // Each call answers what `answer` was when it was made; 0.2 the slowest.
  const fetcher = () => {
    const value = answer
    return new Promise((resolve) => setTimeout(resolve, value === 0.2 ? 350 : 150, value))
  }
  installHost({ dbPath, logger, saturationFetchers: { slowp: fetcher } })
  process.env.QUOTA_SATURATION_FETCH_TIMEOUT_MS = '30'
  try {
    const dim = { unit: 'percent', window: '5h' }
    assert.equal(await getSaturation(c, 'slowp', dim), 0, 'the fallback, at the timeout')
    await new Promise((resolve) => setTimeout(resolve, 250))
    assert.equal(await getSaturation(c, 'slowp', dim), 0.95, 'the late answer, stored when it came')
    // The late answer of a fetch a newer one replaced, coming after the newer one's, is not
    // stored over it.
    _clearSaturationCache()
    answer = 0.2
    assert.equal(await getSaturation(c, 'slowp', dim), 0)
    _clearSaturationCache()
    answer = 0.6
    assert.equal(await getSaturation(c, 'slowp', dim), 0)
    await new Promise((resolve) => setTimeout(resolve, 450))
    assert.equal(await getSaturation(c, 'slowp', dim), 0.6)
  } finally {
    delete process.env.QUOTA_SATURATION_FETCH_TIMEOUT_MS
    install()
  }
})

test('100 concurrent cold enforces on one connection call the fetcher once per dimension (single flight)', { timeout: 10_000 }, async () => {
  const c = conn()
  hostPool({ connections: [c], allocations: [{ key: 'crowd', weight: 100 }] })
  hostPlan(c, 'crowdp', [{ unit: 'requests', window: 'hourly', limit: 1000 }])
  let calls = 0
  let release
  const gate = new Promise((resolve) => { release = resolve })
  installHost({ dbPath, logger, saturationFetchers: { crowdp: async () => { calls++; await gate; return 0.1 } } })
  const pending = Array.from({ length: 100 }, () => enforceQuotaShare({ apiKeyId: 'crowd', connectionId: c, provider: 'crowdp' }))
  await new Promise((resolve) => setImmediate(resolve))
  release()
  const results = await Promise.all(pending)
  assert.ok(results.every((r) => r.kind === 'allow'))
  assert.equal(calls, 1)
  install()
})

test('seam usage fetches: one usage call serves every window of a connection, shared by concurrent requests', async () => {
  let calls = 0
  __setGenericUsageFetcherForTests(async () => {
    calls++
    await new Promise((resolve) => setTimeout(resolve, 5))
    return { percentUsed: 0.6 }
  })
  try {
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => getSaturation('seam-conn', 'someprovider', { unit: 'percent', window: i % 2 ? '5h' : 'weekly' })),
    )
    assert.equal(calls, 1)
    assert.deepEqual([...new Set(answers)], [0.6])
  } finally {
    __setGenericUsageFetcherForTests(null)
  }
})

test('the generic seam: percentUsed, else used_percent, over the token headers; a failed fetch or neither takes the headers', async () => {
  const headers = { 'x-ratelimit-limit-tokens': '1000', 'x-ratelimit-remaining-tokens': '100' } // 0.9
  const cases = [
    [async () => ({ percentUsed: 0.5, used_percent: 0.2 }), 0.5],
    [async () => ({ used_percent: 0.2 }), 0.2],
    [async () => ({ percentUsed: 1.7 }), 1],
    [async () => ({ percentUsed: Number.NaN, used_percent: 0.2 }), 0.9],
    [async () => ({ percentUsed: '0.5' }), 0.9],
    [async () => ({ quotas: { 'session (5h)': { used: 50 } } }), 0.9],
    [async () => null, 0.9],
    [async () => { throw new Error('usage down') }, 0.9],
  ]
  try {
    for (const [i, [fetcher, expected]] of cases.entries()) {
      _clearSaturationCache()
      storeRateLimitHeaders(`gen-${i}`, 'openai', headers)
      __setGenericUsageFetcherForTests(fetcher)
      assert.equal(await getSaturation(`gen-${i}`, 'openai', { unit: 'tokens', window: 'hourly' }), expected, `case ${i}`)
    }
    _clearSaturationCache()
    __setGenericUsageFetcherForTests(async () => null)
    assert.equal(await getSaturation('gen-none', 'openai', { unit: 'tokens', window: 'hourly' }), 0)
  } finally {
    __setGenericUsageFetcherForTests(null)
  }
})

test('the anthropic seam: an OAuth connection\'s plan window, else the anthropic requests headers, else 0', async () => {
  const oauth = { id: 'claude-1', provider: 'claude', authType: 'oauth', accessToken: 'token' }
  const usage = (fiveHour, weekly) => ({
    quotas: {
      'session (5h)': { used: fiveHour, total: 100, remainingPercentage: Math.max(0, 100 - fiveHour), resetAt: null },
      'weekly (7d)': { used: weekly, total: 100, remainingPercentage: Math.max(0, 100 - weekly), resetAt: null },
    },
  })
  const seam = (connection, fetched) => {
    let calls = 0
    __setAnthropicSaturationDepsForTests({
      loadConnection: async () => connection,
      fetchUsage: async () => {
        calls++
        return fetched()
      },
    })
    _clearSaturationCache()
    return () => calls
  }
  const saturation = (id, provider, window) => getSaturation(id, provider, { unit: 'percent', window })
  try {
    // The plan window's `used`, in percent; monthly reads the week.
    const calls = seam(oauth, () => usage(80, 40))
    assert.equal(await saturation('claude-1', 'claude', '5h'), 0.8)
    assert.equal(await saturation('claude-1', 'claude', 'weekly'), 0.4)
    assert.equal(await saturation('claude-1', 'anthropic', 'monthly'), 0.4)
    assert.equal(await saturation('claude-1', 'claude', '5h'), 0.8)
    assert.equal(calls(), 3, 'a usage fetch per cold entry, then the cache')
    seam({ ...oauth, authType: undefined }, () => usage(140, 0))
    assert.equal(await saturation('claude-1', 'claude', '5h'), 1)

    // The usage feeds the connection's account buckets.
    seam(oauth, () => usage(100, 10))
    await saturation('claude-buckets', 'claude', '5h')
    assert.equal(isBucketSaturated('claude-buckets', '5h'), true)
    assert.equal(isBucketSaturated('claude-buckets', '7d'), false)

    // An API-key connection has no plan window: the requests headers kept under `anthropic`.
    storeRateLimitHeaders('apikey-1', 'anthropic', { 'anthropic-ratelimit-requests-limit': '100', 'anthropic-ratelimit-requests-remaining': '30' })
    const apiKeyCalls = seam({ id: 'apikey-1', authType: 'apikey', apiKey: 'sk' }, () => usage(90, 90))
    assert.equal(await saturation('apikey-1', 'claude', '5h'), 0.7)
    assert.equal(apiKeyCalls(), 0)
    // No connection: nothing fetched, no headers, 0.
    const noCalls = seam(null, () => usage(90, 90))
    assert.equal(await saturation('missing', 'claude', '5h'), 0)
    assert.equal(noCalls(), 0)
    // A window the plan has no entry for, and a failing fetch, take the headers too (and say so).
    seam(oauth, () => usage(90, 90))
    assert.equal(await saturation('apikey-1', 'claude', 'hourly'), 0.7)
    seam(oauth, () => { throw new Error('429 rate limited') })
    warnings.length = 0
    assert.equal(await saturation('apikey-1', 'claude', '5h'), 0.7)
    assert.equal(await saturation('claude-1', 'claude', 'weekly'), 0)
    assert.ok(warnings.some((w) => /anthropic usage saturation failed/.test(w.msg) && /429/.test(w.error)), JSON.stringify(warnings))
    // No seam and no fetcher: the same fallback for anthropic; another provider's is its token headers.
    __setAnthropicSaturationDepsForTests(null)
    _clearSaturationCache()
    assert.equal(await saturation('apikey-1', 'anthropic', '5h'), 0.7)
    storeRateLimitHeaders('requests-only', 'openai', { 'x-ratelimit-limit-requests': '100', 'x-ratelimit-remaining-requests': '30' })
    assert.equal(await saturation('requests-only', 'openai', '5h'), 0)
  } finally {
    __setAnthropicSaturationDepsForTests(null)
  }
})

test('getTokenHeaderSaturation: resetAt in epoch ms, from an RFC 3339 time or a duration', () => {
  storeRateLimitHeaders('reset-1', 'anthropic', {
    'anthropic-ratelimit-tokens-limit': '1000',
    'anthropic-ratelimit-tokens-remaining': '0',
    'anthropic-ratelimit-tokens-reset': '2026-01-01T00:00:30Z',
  })
  assert.deepEqual(getTokenHeaderSaturation('anthropic', 'reset-1'), { saturation: 1, resetAt: Date.parse('2026-01-01T00:00:30Z') })
  const before = Date.now()
  storeRateLimitHeaders('reset-2', 'openai', { 'x-ratelimit-limit-tokens': '1000', 'x-ratelimit-remaining-tokens': '10', 'x-ratelimit-reset-tokens': '1h30m15s' })
  const after = Date.now()
  const { resetAt } = getTokenHeaderSaturation('openai', 'reset-2')
  assert.equal(typeof resetAt, 'number')
  assert.ok(resetAt >= before + 5_415_000 && resetAt <= after + 5_415_000, String(resetAt))
  storeRateLimitHeaders('reset-3', 'openai', { 'x-ratelimit-limit-tokens': '1000', 'x-ratelimit-remaining-tokens': '250' })
  assert.deepEqual(getTokenHeaderSaturation('openai', 'reset-3'), { saturation: 0.75, resetAt: null })
})

test('storeRateLimitHeaders keeps a requests reading and a token reading apart: a response without one leaves it as it was', async () => {
  install()
  const tokens = new Headers({ 'anthropic-ratelimit-tokens-limit': '1000', 'anthropic-ratelimit-tokens-remaining': '100' })
  storeRateLimitHeaders('apart-1', 'anthropic', tokens)
  storeRateLimitHeaders('apart-1', 'anthropic', { 'anthropic-ratelimit-requests-limit': '50', 'anthropic-ratelimit-requests-remaining': '10' })
  storeRateLimitHeaders('apart-1', 'anthropic', { 'anthropic-ratelimit-tokens-limit': '0', 'content-type': 'text/plain' })
  assert.deepEqual(getTokenHeaderSaturation('anthropic', 'apart-1'), { saturation: 0.9, resetAt: null })
  assert.equal(await getSaturation('apart-1', 'anthropic', { unit: 'requests', window: 'hourly' }), 0.8)
  // The token groups in order (anthropic's own before openai's, names in any case), each
  // with its own reset;
  // bare x-ratelimit-limit/-remaining are a requests reading.
  storeRateLimitHeaders('apart-2', 'openai', {
    'anthropic-ratelimit-tokens-limit': '1000',
    'Anthropic-RateLimit-Tokens-Remaining': '100',
    'x-ratelimit-limit-tokens': '1000',
    'x-ratelimit-remaining-tokens': '900',
    'x-ratelimit-reset-tokens': '6m0s',
    'x-ratelimit-limit': '50',
    'x-ratelimit-remaining': '10',
  })
  assert.deepEqual(getTokenHeaderSaturation('openai', 'apart-2'), { saturation: 0.9, resetAt: null })
  storeRateLimitHeaders('apart-3', 'anthropic', { 'x-ratelimit-limit': '50', 'x-ratelimit-remaining': '10' })
  assert.equal(await getSaturation('apart-3', 'anthropic', { unit: 'requests', window: 'hourly' }), 0.8)
})

test('stale-while-revalidate: an expired entry is served at once while one background refresh runs', { timeout: 10_000 }, async () => {
  const c = conn()
  hostPool({ connections: [c], allocations: [{ key: 'warm', weight: 50 }, { key: 'warm2', weight: 50 }] })
  hostPlan(c, 'warmp', [{ unit: 'requests', window: 'hourly', limit: 100 }])
  let calls = 0
  let release
  installHost({ dbPath, logger, saturationFetchers: { warmp: () => { calls++; return new Promise((resolve) => { release = resolve }) } } })
  // A value fetched 31 s ago: expired, still the last known one.
  native.putSaturation('warmp', c, 'requests', 'hourly', 0.1, Date.now() - 31_000)
  const results = await Promise.all(Array.from({ length: 10 }, () => enforceQuotaShare({ apiKeyId: 'warm', connectionId: c, provider: 'warmp' })))
  assert.ok(results.every((r) => r.kind === 'allow'), 'answered from the stale value, the fetch still pending')
  assert.equal(calls, 1, 'one background refresh')
  assert.equal(await getSaturation(c, 'warmp', { unit: 'requests', window: 'hourly' }), 0.1)
  assert.equal(calls, 1)
  release(0.9)
  await new Promise((resolve) => setImmediate(resolve))
  assert.equal(await getSaturation(c, 'warmp', { unit: 'requests', window: 'hourly' }), 0.9, 'the refresh landed')
  assert.equal(calls, 1)
  install()
})

test('saturation: cached for 30 s per (provider, connection, unit, window); header fallback', async () => {
  let calls = 0
  installHost({ dbPath, logger, saturationFetchers: { sat: async () => { calls++; return 0.4 } } })
  assert.equal(await getSaturation('s1', 'sat', { unit: 'tokens', window: 'daily' }), 0.4)
  assert.equal(await getSaturation('s1', 'sat', { unit: 'tokens', window: 'daily' }), 0.4)
  assert.equal(calls, 1)
  await getSaturation('s1', 'sat', { unit: 'tokens', window: 'weekly' })
  assert.equal(calls, 2)
  install()
  storeRateLimitHeaders('h1', 'openai', { 'x-ratelimit-limit-tokens': '1000', 'x-ratelimit-remaining-tokens': '100', 'x-ratelimit-reset-tokens': '6m0s' })
  const fallback = getTokenHeaderSaturation('openai', 'h1')
  assert.equal(fallback.saturation, 0.9)
  assert.ok(fallback.resetAt > Date.now() + 350_000)
  assert.equal(await getSaturation('h1', 'openai', { unit: 'tokens', window: 'hourly' }), 0.9)
  assert.equal(getTokenHeaderSaturation('openai', 'nobody'), null)
})

test('driver precedence: DB setting beats env beats default; redis without a usable client falls back with a warning', async () => {
  resetQuotaStoreSingleton()
  assert.throws(() => getQuotaStoreSync())
  const store = await getQuotaStore()
  assert.equal(store, getSqliteQuotaStore())
  assert.equal(getQuotaStoreSync(), store)
  resetQuotaStoreSingleton()
  process.env.QUOTA_STORE_DRIVER = 'redis'
  await getQuotaStore()
  assert.ok(warnings.some((w) => w.component === 'quota:factory' && /without a Redis URL/.test(w.msg)))
  warnings.length = 0
  resetQuotaStoreSingleton()
  host.prepare("INSERT OR REPLACE INTO key_value (namespace, key, value) VALUES ('settings', 'quotaStore', ?)").run(JSON.stringify({ driver: 'redis', redisUrl: 'redis://user:secret@127.0.0.1:1' }))
  process.env.QUOTA_STORE_DRIVER = 'sqlite'
  assert.equal(await getQuotaStore(), getSqliteQuotaStore())
  const warning = warnings.find((w) => w.component === 'quota:factory')
  assert.ok(warning, 'the DB setting (redis) won over the env (sqlite)')
  assert.ok(!JSON.stringify(warnings).includes('secret'), 'the password is masked')
  host.prepare("DELETE FROM key_value WHERE namespace = 'settings' AND key = 'quotaStore'").run()
  delete process.env.QUOTA_STORE_DRIVER
  resetQuotaStoreSingleton()
})

test('configuration: invalid values fall back to defaults with one warning each', () => {
  process.env.QUOTA_SOFT_DEPRIORITIZE_FACTOR = 'lots'
  assert.equal(softPenaltyFactor(), 0.7)
  assert.equal(softPenaltyFactor(), 0.7)
  assert.equal(warnings.filter((w) => w.component === 'quota:config').length, 1)
  process.env.QUOTA_SOFT_DEPRIORITIZE_FACTOR = '3'
  assert.equal(softPenaltyFactor(), 1)
  process.env.QUOTA_SOFT_DEPRIORITIZE_FACTOR = '0.25'
  assert.equal(softPenaltyFactor(), 0.25)
  delete process.env.QUOTA_SOFT_DEPRIORITIZE_FACTOR
})

test('spend recorder: buildConsumptionCost, scheduling on the next turn, streaming rules', async () => {
  assert.deepEqual(buildConsumptionCost({ prompt_tokens: 10, completion_tokens: 'x' }, -3), { tokens: 10, usd: 0, requests: 1 })
  assert.deepEqual(buildConsumptionCost(null, 0.5), { tokens: 0, usd: 0.5, requests: 1 })
  // Numeric strings count, as the host reads a usage.
  assert.deepEqual(buildConsumptionCost({ prompt_tokens: '10', completion_tokens: ' 5 ' }, 0), { tokens: 15, usd: 0, requests: 1 })
  assert.deepEqual(buildConsumptionCost({ prompt_tokens: 'Infinity', completion_tokens: null }, Infinity), { tokens: 0, usd: 0, requests: 1 })
  const c = conn()
  const id = hostPool({ connections: [c], allocations: [{ key: 'sched', weight: 100 }] })
  const result = scheduleRecordConsumption({ apiKeyId: 'sched', connectionId: c, provider: 'kimi', cost: {} })
  assert.equal(result, undefined)
  const bucket = Math.floor(Date.now() / HOUR)
  assert.equal(getBucket('sched', `${id}:requests:hourly`, bucket), 0, 'nothing written synchronously')
  await new Promise((resolve) => setImmediate(() => setImmediate(resolve)))
  assert.equal(getBucket('sched', `${id}:requests:hourly`, bucket), 1)
  const scheduled = []
  const deps = { calculateCost: async () => { throw new Error('no price') }, schedule: (input) => scheduled.push(input) }
  await recordStreamingConsumption({ apiKeyId: 'sched', connectionId: c, model: 'm', streamUsage: { prompt_tokens: 3, completion_tokens: 4 }, streamStatus: 200 }, deps)
  assert.deepEqual(scheduled, [{ apiKeyId: 'sched', connectionId: c, provider: 'unknown', model: 'm', cost: { tokens: 7, usd: 0, requests: 1 } }])
  await recordStreamingConsumption({ apiKeyId: 'sched', connectionId: c, model: 'm', streamUsage: {}, streamStatus: 500 }, deps)
  await recordStreamingConsumption({ connectionId: c, model: 'm', streamUsage: {}, streamStatus: 200 }, deps)
  assert.equal(scheduled.length, 1)
  // As the host passes them on: an empty model is none, an empty provider stays.
  await recordStreamingConsumption({ apiKeyId: 'sched', connectionId: c, provider: '', model: '', streamUsage: null, streamStatus: 200 }, deps)
  assert.deepEqual(scheduled.pop(), { apiKeyId: 'sched', connectionId: c, provider: '', model: undefined, cost: { tokens: 0, usd: 0, requests: 1 } })
  // No usage: no price asked for, the request still counted.
  let priced = 0
  const pricing = { calculateCost: async () => { priced++; return 1 }, schedule: (input) => scheduled.push(input) }
  await recordStreamingConsumption({ apiKeyId: 'sched', connectionId: c, model: 'm', streamUsage: null, streamStatus: 200 }, pricing)
  assert.equal(priced, 0)
  assert.deepEqual(scheduled[1].cost, { tokens: 0, usd: 0, requests: 1 })
})
