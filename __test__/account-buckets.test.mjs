// Account buckets (docs/contract.md §10) through the host's import path.
import { test, beforeEach } from 'node:test'
import assert from 'node:assert/strict'
import {
  SATURATION_THRESHOLD_PCT,
  isBucketSaturated,
  recordUsage,
  updateAccountBuckets,
  _clearBucketsForTest,
  _bucketCountForTest,
} from '@omniroute/quota-engine/compat/accountBuckets'

const T0 = 1_700_000_000_000
const iso = (ms) => new Date(ms).toISOString()

beforeEach(() => _clearBucketsForTest())

test('SATURATION_THRESHOLD_PCT is 100', () => {
  assert.equal(SATURATION_THRESHOLD_PCT, 100)
})

test('usage at the threshold saturates the window until its reset', () => {
  recordUsage('c1', '5h', 100, iso(T0 + 60_000), T0)
  assert.equal(isBucketSaturated('c1', '5h', T0), true)
  assert.equal(isBucketSaturated('c1', '5h', T0 + 59_999), true)
  assert.equal(isBucketSaturated('c1', '7d', T0), false, 'another window')
  assert.equal(isBucketSaturated('c2', '5h', T0), false, 'another connection')
  assert.equal(_bucketCountForTest(), 1)
})

test('the reset is lazy, at the reset instant', () => {
  recordUsage('c1', '5h', 120, iso(T0 + 1000), T0)
  assert.equal(_bucketCountForTest(), 1, 'kept until someone looks')
  assert.equal(isBucketSaturated('c1', '5h', T0 + 1000), false)
  assert.equal(_bucketCountForTest(), 0)
})

test('usedPct below the threshold clears the entry', () => {
  recordUsage('c1', '7d', 100, null, T0)
  recordUsage('c1', '7d', 99.9, null, T0)
  assert.equal(isBucketSaturated('c1', '7d', T0), false)
  assert.equal(_bucketCountForTest(), 0)
})

test('a usedPct that is not finite clears the entry', () => {
  for (const used of [NaN, Infinity, -Infinity, undefined, null, '100']) {
    recordUsage('c1', '7d', 100, null, T0)
    recordUsage('c1', '7d', used, null, T0)
    assert.equal(_bucketCountForTest(), 0, String(used))
  }
})

test('a reset already past clears the entry', () => {
  recordUsage('c1', '5h', 100, null, T0)
  recordUsage('c1', '5h', 100, iso(T0), T0)
  assert.equal(_bucketCountForTest(), 0, 'reset == now is past')
  recordUsage('c1', '5h', 100, iso(T0 - 1), T0)
  assert.equal(_bucketCountForTest(), 0)
})

test('an unknown reset saturates until a reading clears it', () => {
  recordUsage('c1', '7d:opus', 100, null, T0)
  assert.equal(isBucketSaturated('c1', '7d:opus', T0 + 365 * 86_400_000), true)
  recordUsage('c1', '7d:opus', 10, null, T0)
  assert.equal(isBucketSaturated('c1', '7d:opus', T0), false)
})

test('a new reading replaces the entry of the same window', () => {
  recordUsage('c1', '5h', 100, iso(T0 + 1000), T0)
  recordUsage('c1', '5h', 100, iso(T0 + 5000), T0)
  assert.equal(_bucketCountForTest(), 1)
  assert.equal(isBucketSaturated('c1', '5h', T0 + 2000), true)
})

test('an empty connection id stores nothing', () => {
  recordUsage('', '5h', 100, null, T0)
  updateAccountBuckets('', { quotas: { 'session (5h)': { used: 1, total: 1, resetAt: null } } }, T0)
  assert.equal(_bucketCountForTest(), 0)
  assert.equal(isBucketSaturated('', '5h', T0), false)
})

test('updateAccountBuckets maps session (5h), weekly (7d) and weekly <m> (7d)', () => {
  const full = { used: 50, total: 50, remaining: 0, resetAt: iso(T0 + 60_000) }
  updateAccountBuckets('c1', {
    quotas: {
      'session (5h)': full,
      'weekly (7d)': full,
      'weekly opus (7d)': full,
      'monthly (30d)': full,
      'session': full,
    },
  }, T0)
  assert.equal(_bucketCountForTest(), 3)
  assert.equal(isBucketSaturated('c1', '5h', T0), true)
  assert.equal(isBucketSaturated('c1', '7d', T0), true)
  assert.equal(isBucketSaturated('c1', '7d:opus', T0), true)
})

test('updateAccountBuckets derives usedPct: 100 - remainingPercentage first, then used / total', () => {
  const reading = (quota) => {
    _clearBucketsForTest()
    updateAccountBuckets('c1', { quotas: { 'session (5h)': { resetAt: null, ...quota } } }, T0)
    return isBucketSaturated('c1', '5h', T0)
  }
  assert.equal(reading({ remainingPercentage: 0, used: 0, total: 100 }), true, 'remainingPercentage wins')
  assert.equal(reading({ remainingPercentage: 1, used: 100, total: 100 }), false, 'remainingPercentage wins')
  assert.equal(reading({ used: 100, total: 100 }), true)
  assert.equal(reading({ used: 99, total: 100 }), false)
  assert.equal(reading({ total: 100, remaining: 0 }), true, '(total - remaining) / total')
  assert.equal(reading({ used: 100, total: 100, unlimited: true }), false, 'unlimited is never saturated')
})

test('updateAccountBuckets clears a window whose usage dropped or whose reset passed', () => {
  recordUsage('c1', '5h', 100, null, T0)
  updateAccountBuckets('c1', { quotas: { 'session (5h)': { used: 1, total: 100, resetAt: null } } }, T0)
  assert.equal(_bucketCountForTest(), 0)
  recordUsage('c1', '7d', 100, null, T0)
  updateAccountBuckets('c1', { quotas: { 'weekly (7d)': { used: 100, total: 100, resetAt: iso(T0 - 1) } } }, T0)
  assert.equal(_bucketCountForTest(), 0)
})

test('updateAccountBuckets skips malformed entries and leaves their windows alone', () => {
  recordUsage('c1', '7d', 100, null, T0)
  updateAccountBuckets('c1', {
    quotas: {
      'session (5h)': 'full',
      'weekly (7d)': { used: 'lots', total: 100, resetAt: null },
      'weekly opus (7d)': { used: 100, total: 0, resetAt: null },
      'weekly sonnet (7d)': { used: 100, total: 100, resetAt: 'next tuesday' },
      'weekly haiku (7d)': null,
    },
  }, T0)
  assert.equal(_bucketCountForTest(), 1)
  assert.equal(isBucketSaturated('c1', '7d', T0), true, 'the malformed 7d entry changed nothing')
})

test('updateAccountBuckets ignores a missing reading or quotas', () => {
  for (const usage of [null, undefined, {}, { quotas: null }, { message: 'unsupported' }]) {
    updateAccountBuckets('c1', usage, T0)
  }
  assert.equal(_bucketCountForTest(), 0)
})

test('nowMs defaults to Date.now()', () => {
  recordUsage('c1', '5h', 100, iso(Date.now() + 3_600_000))
  assert.equal(isBucketSaturated('c1', '5h'), true)
  recordUsage('c1', '5h', 100, iso(Date.now() - 1000))
  assert.equal(isBucketSaturated('c1', '5h'), false)
})

test('bad input throws TypeError/RangeError with ERR_QUOTA_INVALID_ARG naming the argument', () => {
  const cases = [
    [() => recordUsage(1, '5h', 100, null, T0), TypeError, 'connectionId'],
    [() => recordUsage('c1', 5, 100, null, T0), TypeError, 'windowKey'],
    [() => recordUsage('c1', '5h', 100, 12345, T0), TypeError, 'resetAt'],
    [() => recordUsage('c1', '5h', 100, 'tomorrow', T0), RangeError, 'resetAt'],
    [() => recordUsage('c1', '5h', 100, null, NaN), RangeError, 'nowMs'],
    [() => isBucketSaturated('c1', null, T0), TypeError, 'windowKey'],
    [() => updateAccountBuckets('c1', 'usage', T0), TypeError, 'usageResult'],
    [() => updateAccountBuckets('c1', { quotas: 7 }, T0), TypeError, 'usageResult.quotas'],
  ]
  for (const [call, ErrorClass, field] of cases) {
    assert.throws(call, (err) => err instanceof ErrorClass && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith(`${field}: `), field)
  }
  assert.equal(_bucketCountForTest(), 0)
})

test('a reading without usage or quotas does not even name the connection', async () => {
  const { createRequire } = await import('node:module')
  const { __schedulerSizesForTests } = createRequire(import.meta.url)('../binding.js')
  const before = __schedulerSizesForTests().symbols
  updateAccountBuckets('never-named-1', null, T0)
  updateAccountBuckets('never-named-2', undefined, T0)
  updateAccountBuckets('never-named-3', { quotas: null }, T0)
  assert.equal(__schedulerSizesForTests().symbols, before, 'nothing interned')
  updateAccountBuckets('named', { quotas: {} }, T0)
  assert.equal(__schedulerSizesForTests().symbols, before + 1, 'an empty quotas object names it')
})
