// decideFairShare's two ways in (lib/fairShare.js): the packed crossing for well-formed
// input and the engine's checked entry for the rest. Whatever the input, the public
// function answers exactly what the checked entry answers — the same decision, or the same
// error — so the packing can never change a decision or hide a field's error.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { rng } from './support/rng.mjs'
import { decideFairShare } from '@omniroute/quota-engine/compat/fairShare'

const require = createRequire(import.meta.url)
const native = require('../lib/native.js')


const UNITS = ['percent', 'requests', 'tokens', 'usd']
const WINDOWS = ['5h', 'hourly', 'daily', 'weekly', 'monthly']
const POLICIES = ['hard', 'soft', 'burst']
const ODD = [undefined, null, 'x', NaN, Infinity, -Infinity, -0, {}, [], true, 1e308, 'hard', 'tokens', 7]

function inputFor(random) {
  const pick = (list) => list[Math.floor(random() * list.length)]
  const number = () => (random() < 0.1 ? pick([NaN, Infinity, -1, 0, 1e15]) : Math.round(random() * 200 * 100) / 100)
  const count = Math.floor(random() * 4)
  const dimensions = []
  const consumed = {}
  for (let i = 0; i < count; i++) {
    const key = { poolId: pick(['p1', 'p2', 'p:3']), unit: pick(UNITS), window: pick(WINDOWS) }
    const dimension = { key, limit: number(), consumedTotal: number(), globalUsedPercent: random() }
    if (random() < 0.5) {
      dimension.buckets = { nowMs: 1_700_000_000_000 + Math.floor(random() * 1e8), keyPrev: number(), keyCurr: number(), poolPrev: number(), poolCurr: number() }
    }
    if (random() < 0.8) consumed[`${key.poolId}:${key.unit}:${key.window}`] = number()
    dimensions.push(dimension)
  }
  const allocation = { weight: Math.floor(random() * 101), policy: pick(POLICIES) }
  if (random() < 0.4) {
    allocation.capValue = number()
    allocation.capUnit = pick(UNITS)
  }
  const input = { dimensions, allocation, consumedByThisKey: random() < 0.9 ? consumed : null, saturationThreshold: pick([0.5, 0.8, 0, 1]) }
  // One time in three, make one value odd: a wrong type, a missing field, an unknown name.
  if (random() < 0.33) {
    const odd = pick(ODD)
    const places = [
      () => (input.saturationThreshold = odd),
      () => (input.allocation.weight = odd),
      () => (input.allocation.policy = odd),
      () => (input.allocation.capValue = odd),
      () => (input.allocation.capUnit = odd),
      () => (input.allocation = odd),
      () => (input.consumedByThisKey = odd),
      () => (input.dimensions = odd),
    ]
    if (dimensions.length) {
      const dim = pick(dimensions)
      places.push(
        () => (dim.limit = odd),
        () => (dim.consumedTotal = odd),
        () => (dim.globalUsedPercent = odd),
        () => (dim.key.unit = odd),
        () => (dim.key.window = odd),
        () => (dim.key.poolId = odd),
        () => (dim.key = odd),
        () => (dim.buckets = odd),
        () => dim.buckets && (dim.buckets.keyPrev = odd),
        () => (input.dimensions[0] = odd),
      )
    }
    pick(places)()
  }
  return input
}

function outcome(decide, input) {
  try {
    return { value: decide(input) }
  } catch (err) {
    return { error: { name: err.name, code: err.code, message: err.message } }
  }
}

test('the packed crossing answers exactly what the checked entry answers (20 000 generated inputs)', () => {
  const random = rng(0x5eed)
  let packed = 0
  for (let i = 0; i < 20_000; i++) {
    const input = inputFor(random)
    const expected = outcome(native.decideFairShare, input)
    const actual = outcome(decideFairShare, input)
    assert.deepEqual(actual, expected, `case ${i}: ${JSON.stringify(input)}`)
    if (expected.value) {
      assert.deepEqual(Object.keys(actual.value), Object.keys(expected.value), `case ${i}: field order`)
      packed++
    }
  }
  // Most cases decide (the generator is not all errors).
  assert.ok(packed > 10_000, `only ${packed} cases decided`)
})

test('well-formed input takes the packed crossing, never the checked entry', (t) => {
  const checked = native.decideFairShare
  let fallbacks = 0
  native.decideFairShare = (input) => (fallbacks++, checked(input))
  t.after(() => (native.decideFairShare = checked))
  const random = rng(7)
  let wellFormed = 0
  for (let i = 0; i < 5_000; i++) {
    const input = inputFor(random)
    const before = fallbacks
    let threw = false
    try { decideFairShare(input) } catch { threw = true }
    const odd = JSON.stringify(input, (k, v) => (typeof v === 'number' && !Number.isFinite(v) ? 0 : v))
    if (!threw && fallbacks === before) wellFormed++
    if (threw) assert.equal(fallbacks, before + 1, `an error comes from the checked entry: ${odd}`)
  }
  assert.ok(wellFormed > 3_000, `only ${wellFormed} of 5000 took the packed crossing`)
  const plain = { dimensions: [{ key: { poolId: 'p', unit: 'tokens', window: 'daily' }, limit: 10, consumedTotal: 1, globalUsedPercent: 0.2, buckets: { nowMs: 1, keyPrev: 0, keyCurr: 1, poolPrev: 0, poolCurr: 1 } }], allocation: { weight: 50, policy: 'soft', capValue: 5, capUnit: 'tokens' }, consumedByThisKey: { 'p:tokens:daily': 1 }, saturationThreshold: 0.5 }
  const before = fallbacks
  assert.deepEqual(decideFairShare(plain), { kind: 'allow', reason: 'ok' })
  assert.equal(fallbacks, before)
})

test('malformed input still names the field, whichever way it came in', () => {
  const input = { dimensions: [{ key: { poolId: 'p', unit: 'tokens', window: 'daily' }, limit: '10', consumedTotal: 0, globalUsedPercent: 0 }], allocation: { weight: 1, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }
  assert.throws(() => decideFairShare(input), (err) => err instanceof TypeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith('input.dimensions[0].limit'))
  input.dimensions[0].limit = 10
  input.dimensions[0].key.unit = 'parsecs'
  assert.throws(() => decideFairShare(input), (err) => err instanceof RangeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.includes('input.dimensions[0].key.unit'))
})

test('more dimensions than the packed buffer holds are decided the checked way, the same', () => {
  const dimensions = Array.from({ length: 40 }, (_, i) => ({ key: { poolId: 'p', unit: 'requests', window: 'hourly' }, limit: 100, consumedTotal: i === 39 ? 100 : 0, globalUsedPercent: 0 }))
  const input = { dimensions, allocation: { weight: 10, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }
  assert.deepEqual(decideFairShare(input), native.decideFairShare(input))
  assert.equal(decideFairShare(input).reason, 'global-saturated')
})

test('the key-string memo is bounded: many distinct pool ids decide correctly', () => {
  for (let i = 0; i < 10_000; i++) {
    const key = { poolId: `pool-${i}`, unit: 'tokens', window: 'daily' }
    const input = { dimensions: [{ key, limit: 100, consumedTotal: 50, globalUsedPercent: 0.9 }], allocation: { weight: 10, policy: 'hard' }, consumedByThisKey: { [`pool-${i}:tokens:daily`]: i % 2 ? 10 : 9 }, saturationThreshold: 0.5 }
    assert.equal(decideFairShare(input).kind, i % 2 ? 'block' : 'allow')
  }
})

test('each JS thread packs into its own buffer: a worker and the main thread decide side by side', async () => {
  const { Worker } = await import('node:worker_threads')
  const source = `
    const { parentPort } = require('node:worker_threads')
    const { decideFairShare } = require('@omniroute/quota-engine/compat/fairShare')
    const key = { poolId: 'w', unit: 'tokens', window: 'daily' }
    const out = []
    for (let i = 0; i < 2000; i++) {
      out.push(decideFairShare({ dimensions: [{ key, limit: 100, consumedTotal: i % 120, globalUsedPercent: 0 }], allocation: { weight: 10, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }).reason)
    }
    parentPort.postMessage(out)`
  const worker = new Worker(source, { eval: true })
  const key = { poolId: 'm', unit: 'requests', window: 'hourly' }
  // The main thread keeps deciding (an allow) while the worker decides its own inputs.
  for (let i = 0; i < 2000; i++) {
    assert.deepEqual(decideFairShare({ dimensions: [{ key, limit: 100, consumedTotal: 1, globalUsedPercent: 0 }], allocation: { weight: 10, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }), { kind: 'allow', reason: 'ok' })
  }
  const reasons = await new Promise((resolve, reject) => worker.once('message', resolve).once('error', reject))
  await worker.terminate()
  assert.deepEqual(reasons, Array.from({ length: 2000 }, (_, i) => (i % 120 >= 100 ? 'global-saturated' : 'ok')))
})

// A decideFairShare asked for from inside another one's input (a getter, a Proxy) must not
// overwrite the outer call's packed buffer.
const reentrantDim = (over = {}) => ({ key: { poolId: 'p', unit: 'tokens', window: 'daily' }, limit: 100, consumedTotal: 10, globalUsedPercent: 10, ...over })
function reentrantInput() {
  const second = reentrantDim()
  Object.defineProperty(second, 'limit', {
    enumerable: true,
    get() {
      decideFairShare({ dimensions: [reentrantDim(), reentrantDim(), reentrantDim()], allocation: { weight: 50, policy: 'hard' }, saturationThreshold: 95 })
      return 100
    },
  })
  // The first dimension is saturated: the answer is a block.
  return { dimensions: [reentrantDim({ globalUsedPercent: 100, consumedTotal: 100 }), second], allocation: { weight: 50, policy: 'hard' }, saturationThreshold: 95 }
}

test("a decision made from inside another one's input does not change the outer answer", () => {
  assert.equal(native.decideFairShare(reentrantInput()).kind, 'block', 'the checked entry blocks')
  assert.deepEqual(decideFairShare(reentrantInput()), native.decideFairShare(reentrantInput()))
})
