// WINDOW_MS, dimensionKeyToString, the plan catalog, burn rate and the zod schemas.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import * as dimensions from '@omniroute/quota-engine/compat/dimensions'
import { getKnownPlan, knownProviders } from '@omniroute/quota-engine/compat/planRegistry'
import { computeBurnRate, computeBurnRateFromWindow } from '@omniroute/quota-engine/compat/burnRate'

const { WINDOW_MS, dimensionKeyToString } = dimensions

test('WINDOW_MS has the contract values and is frozen', () => {
  assert.deepEqual({ ...WINDOW_MS }, { hourly: 3_600_000, '5h': 18_000_000, daily: 86_400_000, weekly: 604_800_000, monthly: 2_592_000_000 })
  assert.ok(Object.isFrozen(WINDOW_MS))
})

test('dimensionKeyToString joins pool, unit and window', () => {
  assert.equal(dimensionKeyToString({ poolId: 'abc', unit: 'tokens', window: '5h' }), 'abc:tokens:5h')
  assert.equal(dimensionKeyToString({ poolId: 'abc:model:gpt', unit: 'requests', window: 'hourly' }), 'abc:model:gpt:requests:hourly')
})

test('dimensionKeyToString rejects an unknown unit or window with a RangeError naming it', () => {
  for (const [key, field] of [[{ poolId: 'p', unit: 'bytes', window: '5h' }, 'key.unit'], [{ poolId: 'p', unit: 'usd', window: 'yearly' }, 'key.window']]) {
    assert.throws(() => dimensionKeyToString(key), (err) => err instanceof RangeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith(field))
  }
  assert.throws(() => dimensionKeyToString('p:usd:5h'), (err) => err instanceof TypeError && err.code === 'ERR_QUOTA_INVALID_ARG')
  assert.throws(() => dimensionKeyToString({ poolId: 7, unit: 'usd', window: '5h' }), (err) => err instanceof TypeError && /key\.poolId/.test(err.message))
})

test('the plan catalog matches the contract', () => {
  const eps = Number.EPSILON
  const expected = {
    codex: [['percent', '5h', 100], ['percent', 'weekly', 100]],
    claude: [['percent', '5h', 100], ['percent', 'weekly', 100]],
    glm: [['tokens', '5h', eps], ['tokens', 'weekly', eps]],
    minimax: [['tokens', '5h', eps], ['tokens', 'weekly', eps]],
    'kimi-coding': [['tokens', '5h', eps], ['tokens', 'weekly', eps]],
    deepseek: [['usd', 'monthly', eps]],
    bailian: [['percent', '5h', 100], ['percent', 'weekly', 100], ['percent', 'monthly', 100]],
    kimi: [['requests', 'hourly', 1500]],
    'xiaomi-mimo': [['tokens', 'monthly', 4_100_000_000]],
    'xiaomi-mimo-token-plan': [['tokens', 'monthly', 4_100_000_000]],
    alibaba: [['requests', 'monthly', 90_000]],
    'grok-cli': [['requests', 'daily', 864], ['tokens', 'daily', 18_000_000], ['requests', 'weekly', 6048], ['tokens', 'weekly', 126_000_000]],
  }
  assert.deepEqual(knownProviders().sort(), Object.keys(expected).sort())
  for (const [provider, dims] of Object.entries(expected)) {
    assert.deepEqual(getKnownPlan(provider), { provider, dimensions: dims.map(([unit, window, limit]) => ({ unit, window, limit })) })
  }
  assert.equal(getKnownPlan('openai'), null)
  assert.equal(getKnownPlan('anthropic'), null)
  assert.equal(getKnownPlan('nobody'), null)
})

test('computeBurnRate: EMA of per-second rates, skipping non-increasing timestamps', () => {
  // rates 10/s then 20/s → EMA 0.3 × 20 + 0.7 × 10 = 13
  const rate = computeBurnRate([{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 10 }, { ts: 1000, consumed: 99 }, { ts: 2000, consumed: 30 }], 130)
  assert.ok(Math.abs(rate.tokensPerSecond - 13) < 1e-9)
  assert.ok(Math.abs(rate.timeToExhaustionMs - 10_000) < 1e-6)
  assert.deepEqual(computeBurnRate([{ ts: 5, consumed: 1 }]), { tokensPerSecond: 0, timeToExhaustionMs: null })
  assert.deepEqual(computeBurnRate([{ ts: 0, consumed: 10 }, { ts: 1000, consumed: 0 }], 5), { tokensPerSecond: 0, timeToExhaustionMs: null })
})

test('computeBurnRateFromWindow: zero input gives zeros; a rate gives a time to exhaustion', () => {
  assert.deepEqual(computeBurnRateFromWindow(0, 3_600_000, 100), { tokensPerSecond: 0, timeToExhaustionMs: null })
  const rate = computeBurnRateFromWindow(1000, 3_600_000, 500)
  assert.ok(rate.tokensPerSecond > 0)
  const elapsedSeconds = 1000 / rate.tokensPerSecond
  assert.ok(elapsedSeconds > 0 && elapsedSeconds <= 3600)
  assert.ok(Math.abs(rate.timeToExhaustionMs - (500 / rate.tokensPerSecond) * 1000) < 1e-6)
  assert.throws(() => computeBurnRateFromWindow('x', 1000), (err) => err instanceof TypeError && /consumedTotal/.test(err.message))
})

test('zod schemas: enums, bounds and defaults as the host defines them', () => {
  const { QuotaUnitSchema, QuotaWindowSchema, PolicySchema, QuotaDimensionSchema, PoolAllocationSchema, ProviderPlanSchema, QuotaPoolSchema } = dimensions
  assert.deepEqual(QuotaUnitSchema.options, ['percent', 'requests', 'tokens', 'usd'])
  assert.deepEqual(QuotaWindowSchema.options, ['5h', 'hourly', 'daily', 'weekly', 'monthly'])
  assert.deepEqual(PolicySchema.options, ['hard', 'soft', 'burst'])
  assert.equal(QuotaDimensionSchema.safeParse({ unit: 'usd', window: 'daily', limit: 0 }).success, false)
  assert.deepEqual(QuotaDimensionSchema.parse({ unit: 'usd', window: 'daily', limit: 5, extra: 1 }), { unit: 'usd', window: 'daily', limit: 5 })
  assert.equal(PoolAllocationSchema.safeParse({ apiKeyId: 'k', weight: 101, policy: 'hard' }).success, false)
  assert.equal(PoolAllocationSchema.safeParse({ apiKeyId: '', weight: 10, policy: 'hard' }).success, false)
  assert.equal(PoolAllocationSchema.safeParse({ apiKeyId: 'k', weight: 10, policy: 'hard', capValue: 0 }).success, false)
  assert.equal(PoolAllocationSchema.safeParse({ apiKeyId: 'k', weight: 10, policy: 'hard', capValue: 3, capUnit: 'usd' }).success, true)
  assert.equal(ProviderPlanSchema.safeParse({ connectionId: null, provider: 'kimi', dimensions: [], source: 'auto' }).success, false)
  assert.equal(ProviderPlanSchema.safeParse({ connectionId: null, provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1500 }], source: 'auto' }).success, true)
  const pool = QuotaPoolSchema.parse({ id: 'p', connectionId: 'c', name: 'n', createdAt: '2026-11-30T10:00:00.000Z' })
  assert.deepEqual(pool.allocations, [])
  assert.equal(QuotaPoolSchema.safeParse({ id: 'p', connectionId: 'c', name: 'n', createdAt: 'yesterday' }).success, false)
})
