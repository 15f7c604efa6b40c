// decideFairShare through the host's import path: shapes, rules, and errors.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { decideFairShare } from '@omniroute/quota-engine/compat/fairShare'

const key = { poolId: 'pool-1', unit: 'requests', window: 'hourly' }
const keyString = 'pool-1:requests:hourly'

function decide({ consumed = 0, total = 0, percent = 0, limit = 100, weight = 25, policy = 'hard', capValue, capUnit, buckets } = {}) {
  const dimension = { key, limit, consumedTotal: total, globalUsedPercent: percent }
  if (buckets) dimension.buckets = buckets
  const allocation = { weight, policy }
  if (capValue !== undefined) allocation.capValue = capValue
  if (capUnit !== undefined) allocation.capUnit = capUnit
  return decideFairShare({
    dimensions: [dimension],
    allocation,
    consumedByThisKey: { [keyString]: consumed },
    saturationThreshold: 0.5,
  })
}

test('no dimensions allows with reason ok and no other fields', () => {
  const decision = decideFairShare({ dimensions: [], allocation: { weight: 0, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 })
  assert.deepEqual(decision, { kind: 'allow', reason: 'ok' })
  assert.deepEqual(Object.keys(decision), ['kind', 'reason'])
})

test('generous mode lets a hard key borrow idle share, up to the limit', () => {
  assert.deepEqual(decide({ consumed: 60, total: 60 }), { kind: 'allow', reason: 'ok' })
  assert.deepEqual(decide({ consumed: 100, total: 99 }), { kind: 'block', reason: 'global-saturated' })
})

test('strict mode holds a hard key to its weighted share (>= blocks)', () => {
  assert.deepEqual(decide({ consumed: 25, total: 30, percent: 0.5 }), { kind: 'block', reason: 'fair-share' })
  assert.deepEqual(decide({ consumed: 24.9, total: 30, percent: 0.5 }), { kind: 'allow', reason: 'ok' })
  assert.deepEqual(decide({ consumed: 25, total: 30, percent: 0.49 }), { kind: 'allow', reason: 'ok' })
})

test('soft keys are penalized, not blocked; the field is absent otherwise', () => {
  const penalized = decide({ consumed: 25, total: 30, percent: 0.9, policy: 'soft' })
  assert.deepEqual(penalized, { kind: 'allow', reason: 'ok', penalized: true })
  const fine = decide({ consumed: 10, total: 30, percent: 0.9, policy: 'soft' })
  assert.equal('penalized' in fine, false)
})

test('burst keys pass while the pool has room', () => {
  assert.deepEqual(decide({ consumed: 90, total: 95, percent: 0.9, policy: 'burst' }), { kind: 'allow', reason: 'ok' })
  assert.deepEqual(decide({ consumed: 90, total: 100, percent: 0.9, policy: 'burst' }), { kind: 'block', reason: 'global-saturated' })
})

test('an absolute cap in the dimension unit always blocks; another unit does not', () => {
  assert.deepEqual(decide({ consumed: 5, capValue: 5, capUnit: 'requests', policy: 'burst' }), { kind: 'block', reason: 'cap-absolute' })
  assert.deepEqual(decide({ consumed: 5, capValue: 5, capUnit: 'tokens' }), { kind: 'allow', reason: 'ok' })
})

test('an unknown policy decides like hard', () => {
  const input = { consumed: 25, total: 30, percent: 0.9 }
  assert.deepEqual(decide({ ...input, policy: 'lenient' }), decide({ ...input, policy: 'hard' }))
  assert.deepEqual(decide({ ...input, policy: undefined }), { kind: 'block', reason: 'fair-share' })
})

test('with bucket values a block carries retryAfterMs, and it is correct', () => {
  const windowMs = 3_600_000
  const bucketStart = 1_000 * windowMs
  const nowMs = bucketStart + windowMs / 2
  // effective = 40 × 0.5 + 10 = 30 ≥ fair share 25; it falls below 25 once prev's weight < 15/40.
  const decision = decide({ consumed: 30, total: 30, percent: 0.9, buckets: { nowMs, keyPrev: 40, keyCurr: 10, poolPrev: 40, poolCurr: 10 } })
  assert.equal(decision.kind, 'block')
  assert.equal(decision.reason, 'fair-share')
  const effectiveAt = (t) => 40 * (1 - (t - bucketStart) / windowMs) + 10
  assert.ok(effectiveAt(nowMs + decision.retryAfterMs) < 25)
  assert.ok(effectiveAt(nowMs + decision.retryAfterMs - 1) >= 25)
  // Without bucket values the field is absent.
  assert.equal('retryAfterMs' in decide({ consumed: 30, total: 30, percent: 0.9 }), false)
})

test('bad input throws a TypeError or RangeError naming the field, with a stable code', () => {
  const base = { dimensions: [{ key, limit: 100, consumedTotal: 0, globalUsedPercent: 0 }], allocation: { weight: 10, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }
  const cases = [
    [{ ...base, dimensions: ['nope'] }, TypeError, /dimensions\[0\]/],
    [{ ...base, dimensions: [{ ...base.dimensions[0], limit: '100' }] }, TypeError, /dimensions\[0\]\.limit/],
    [{ ...base, dimensions: [{ ...base.dimensions[0], key: { ...key, window: 'yearly' } }] }, RangeError, /dimensions\[0\]\.key\.window/],
    [{ ...base, dimensions: 'all' }, TypeError, /dimensions/],
    [{ ...base, allocation: null }, TypeError, /allocation/],
    [{ ...base, allocation: { weight: 'ten', policy: 'hard' } }, TypeError, /allocation\.weight/],
    [{ ...base, consumedByThisKey: { [keyString]: 'many' } }, TypeError, /consumedByThisKey/],
    [{ ...base, saturationThreshold: undefined }, TypeError, /saturationThreshold/],
    [undefined, TypeError, /input/],
  ]
  for (const [input, ErrorClass, field] of cases) {
    assert.throws(() => decideFairShare(input), (err) => {
      assert.ok(err instanceof ErrorClass, `${err.constructor.name}: ${err.message}`)
      assert.equal(err.code, 'ERR_QUOTA_INVALID_ARG')
      assert.match(err.message, field)
      return true
    })
  }
})

test('non-finite numbers decide without throwing', () => {
  for (const value of [NaN, Infinity, -Infinity]) {
    const decision = decide({ consumed: value, total: value, percent: value, limit: value, weight: value })
    assert.ok(decision.kind === 'allow' || decision.kind === 'block')
  }
})
