// In-flight leases (docs/contract.md §10) through the host's import path.
import { test, beforeEach } from 'node:test'
import assert from 'node:assert/strict'
import {
  DEFAULT_LEASE_MS,
  incrementInflight,
  decrementInflight,
  getInflight,
  _clearInflightForTest,
  _inflightSizeForTest,
} from '@omniroute/quota-engine/compat/quotaShareInflight'

const T0 = 1_700_000_000_000

beforeEach(() => _clearInflightForTest())

test('DEFAULT_LEASE_MS is two minutes', () => {
  assert.equal(DEFAULT_LEASE_MS, 120_000)
})

test('incrementInflight returns the new count; getInflight reads it', () => {
  assert.equal(incrementInflight('c1', 1000, T0), 1)
  assert.equal(incrementInflight('c1', 1000, T0), 2)
  assert.equal(incrementInflight('c2', 1000, T0), 1)
  assert.equal(getInflight('c1', T0), 2)
  assert.equal(getInflight('c2', T0), 1)
  assert.equal(_inflightSizeForTest(), 2)
})

test('the lease defaults to DEFAULT_LEASE_MS', () => {
  incrementInflight('c1', undefined, T0)
  assert.equal(getInflight('c1', T0 + DEFAULT_LEASE_MS - 1), 1)
  assert.equal(getInflight('c1', T0 + DEFAULT_LEASE_MS), 0)
})

test('getInflight is 0 when unknown or expired, and reading changes nothing', () => {
  assert.equal(getInflight('never-seen', T0), 0)
  incrementInflight('c1', 1000, T0)
  assert.equal(getInflight('c1', T0 + 1000), 0, 'expired at now >= expiry')
  assert.equal(_inflightSizeForTest(), 1, 'get does not prune')
})

test('an expired slot counts as 0 on the next increment', () => {
  incrementInflight('c1', 1000, T0)
  incrementInflight('c1', 1000, T0)
  assert.equal(incrementInflight('c1', 1000, T0 + 1000), 1)
})

test('increment refreshes the expiry to now + lease', () => {
  incrementInflight('c1', 1000, T0)
  incrementInflight('c1', 1000, T0 + 900)
  assert.equal(getInflight('c1', T0 + 1899), 2)
  assert.equal(getInflight('c1', T0 + 1900), 0)
})

test('increment prunes every expired slot', () => {
  incrementInflight('a', 1000, T0)
  incrementInflight('b', 5000, T0)
  incrementInflight('c', 1000, T0)
  assert.equal(_inflightSizeForTest(), 3)
  incrementInflight('d', 1000, T0 + 1000)
  assert.equal(_inflightSizeForTest(), 2, 'a and c pruned; b and d kept')
  assert.equal(getInflight('b', T0 + 1000), 1)
})

test('decrementInflight floors at 0 and removes the slot at 0', () => {
  incrementInflight('c1', 1000, T0)
  incrementInflight('c1', 1000, T0)
  decrementInflight('c1', T0)
  assert.equal(getInflight('c1', T0), 1)
  decrementInflight('c1', T0)
  assert.equal(getInflight('c1', T0), 0)
  assert.equal(_inflightSizeForTest(), 0)
  decrementInflight('c1', T0)
  decrementInflight('never-seen', T0)
  assert.equal(getInflight('c1', T0), 0)
  assert.equal(incrementInflight('c1', 1000, T0), 1, 'no negative count left behind')
})

test('decrementInflight removes an expired slot', () => {
  incrementInflight('c1', 1000, T0)
  incrementInflight('c1', 1000, T0)
  decrementInflight('c1', T0 + 1000)
  assert.equal(_inflightSizeForTest(), 0)
})

test('an empty id returns 0 and stores nothing', () => {
  assert.equal(incrementInflight('', 1000, T0), 0)
  assert.equal(incrementInflight('', 1000, T0), 0)
  assert.equal(getInflight('', T0), 0)
  decrementInflight('', T0)
  assert.equal(_inflightSizeForTest(), 0)
})

test('nowMs defaults to Date.now()', () => {
  const before = Date.now()
  incrementInflight('c1')
  const after = Date.now()
  assert.equal(getInflight('c1'), 1)
  assert.equal(getInflight('c1', before + DEFAULT_LEASE_MS - 1), 1)
  assert.equal(getInflight('c1', after + DEFAULT_LEASE_MS), 0)
  decrementInflight('c1')
  assert.equal(_inflightSizeForTest(), 0)
})

test('bad input throws TypeError/RangeError with ERR_QUOTA_INVALID_ARG naming the argument', () => {
  const cases = [
    [() => incrementInflight(42), TypeError, 'connectionId'],
    [() => incrementInflight('c1', '1000'), TypeError, 'leaseMs'],
    [() => incrementInflight('c1', -1), RangeError, 'leaseMs'],
    [() => incrementInflight('c1', NaN), RangeError, 'leaseMs'],
    [() => incrementInflight('c1', 1000, Infinity), RangeError, 'nowMs'],
    [() => decrementInflight({}, T0), TypeError, 'connectionId'],
    [() => getInflight('c1', 'now'), TypeError, 'nowMs'],
  ]
  for (const [call, ErrorClass, field] of cases) {
    assert.throws(call, (err) => err instanceof ErrorClass && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith(`${field}: `))
  }
  assert.equal(_inflightSizeForTest(), 0)
})
