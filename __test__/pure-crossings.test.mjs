// The pure calls (docs/api.md#the-pure-functions): computeBurnRate and
// computeBurnRateFromWindow cross once, to the engine's checked entry; dimensionKeyToString
// and the plan catalog remember the engine's answers (lib/dimensionKey.js, lib/plans.js),
// answering exactly what the engine's entry answers — the same value, or the same error.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { rng } from './support/rng.mjs'
import { computeBurnRate, computeBurnRateFromWindow } from '@omniroute/quota-engine/compat/burnRate'
import { dimensionKeyToString } from '@omniroute/quota-engine/compat/dimensions'
import { getKnownPlan, knownProviders } from '@omniroute/quota-engine/compat/planRegistry'
import * as main from '@omniroute/quota-engine'

const require = createRequire(import.meta.url)
const native = require('../lib/native.js')


const ODD = [undefined, null, 'x', '5', {}, [], true, 10n, Symbol('s')]

function outcome(call) {
  try {
    return { value: call() }
  } catch (err) {
    return { error: { name: err.name, code: err.code, message: err.message } }
  }
}

/** Counts the calls that reach the engine's entry `name` while `t` runs. */
function counting(t, name) {
  const entry = native[name]
  const counter = { calls: 0 }
  native[name] = (...args) => {
    counter.calls++
    return entry(...args)
  }
  t.after(() => {
    native[name] = entry
  })
  return counter
}

test('computeBurnRate: a well-formed history\'s rate; anything else the error naming the field', () => {
  const history = [{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 10 }, { ts: 2000, consumed: 30 }]
  assert.deepEqual(computeBurnRate(history, 130), { tokensPerSecond: 13, timeToExhaustionMs: 10_000 })
  assert.deepEqual(computeBurnRate(history), { tokensPerSecond: 13, timeToExhaustionMs: null })
  assert.deepEqual(computeBurnRate([], null), { tokensPerSecond: 0, timeToExhaustionMs: null })
  assert.throws(() => computeBurnRate([{ ts: 0, consumed: '1' }]), (err) => err instanceof TypeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith('history[0].consumed'))
  assert.throws(() => computeBurnRate(history, 'x'), (err) => err instanceof TypeError && /remaining/.test(err.message))
})

test('a getter that throws ends the call with its own exception, as in the checked entry', () => {
  const history = [{ ts: 0, consumed: 0 }, { get ts() { throw new Error('boom') }, consumed: 1 }]
  assert.deepEqual(outcome(() => computeBurnRate(history)), outcome(() => native.computeBurnRate(history)))
  assert.throws(() => computeBurnRate(history), { message: 'boom' })
  // Once only: a second read would find a value, the checked entry never does.
  const once = () => {
    let reads = 0
    return [{ ts: 0, consumed: 0 }, { get ts() { if (reads++ === 0) throw new Error('once'); return 1000 }, consumed: 5 }]
  }
  assert.throws(() => computeBurnRate(once()), { message: 'once' })
  assert.throws(() => native.computeBurnRate(once()), { message: 'once' })
  const key = () => {
    let reads = 0
    return { poolId: 'p', get unit() { if (reads++ === 0) throw new Error('once'); return 'tokens' }, window: 'daily' }
  }
  assert.throws(() => dimensionKeyToString(key()), { message: 'once' })
  assert.throws(() => native.dimensionKeyToString(key()), { message: 'once' })
})

test('a Proxy of an array is an array, to every pure call', () => {
  const history = () => new Proxy([{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 5 }], {})
  assert.deepEqual(computeBurnRate(history()), { tokensPerSecond: 5, timeToExhaustionMs: null })
  assert.deepEqual(native.computeBurnRate(history()), { tokensPerSecond: 5, timeToExhaustionMs: null })
  // Its length is its trap's: a bad one is the checked entry's error.
  const odd = new Proxy([], { get: (target, key) => (key === 'length' ? 1.5 : target[key]) })
  assert.deepEqual(outcome(() => computeBurnRate(odd)), outcome(() => native.computeBurnRate(odd)))
  assert.throws(() => computeBurnRate(odd), { code: 'ERR_QUOTA_INVALID_ARG' })
  for (const length of [2.5, -1, NaN, '2', 2 ** 32]) {
    const samples = [{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 5 }, { ts: 2000, consumed: 9 }]
    const proxy = new Proxy(samples, { get: (target, key) => (key === 'length' ? length : target[key]) })
    assert.deepEqual(outcome(() => computeBurnRate(proxy)), outcome(() => native.computeBurnRate(proxy)), String(length))
  }
  const dimensions = new Proxy([{ key: { poolId: 'p', unit: 'tokens', window: 'daily' }, limit: 10, consumedTotal: 10, globalUsedPercent: 1 }], {})
  const input = { dimensions, allocation: { weight: 1, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }
  assert.deepEqual(main.decideFairShare(input), { kind: 'block', reason: 'global-saturated' })
  assert.deepEqual(native.decideFairShare(input), { kind: 'block', reason: 'global-saturated' })
  for (const length of [0.5, -1, NaN, 17]) {
    const odd = { ...input, dimensions: new Proxy(Array(20).fill(dimensions[0]), { get: (target, key) => (key === 'length' ? length : target[key]) }) }
    assert.deepEqual(outcome(() => main.decideFairShare(odd)), outcome(() => native.decideFairShare(odd)), String(length))
  }
})

test('computeBurnRateFromWindow: a window of 1 ms is clock-free; no window gives zeros; a bad window is a RangeError', () => {
  // now mod 1 is always 0, counted as 1 ms.
  assert.deepEqual(computeBurnRateFromWindow(3, 1, 6000), { tokensPerSecond: 3000, timeToExhaustionMs: 2000 })
  assert.deepEqual(computeBurnRateFromWindow(0, 1, 6000), { tokensPerSecond: 0, timeToExhaustionMs: null })
  // A window of 0 or less is a zero input, as the host's module has it.
  for (const windowMs of [0, -0, -1, -Infinity]) {
    assert.deepEqual(computeBurnRateFromWindow(10, windowMs, 5), { tokensPerSecond: 0, timeToExhaustionMs: null }, String(windowMs))
  }
  for (const windowMs of [0.5, NaN, Infinity]) {
    assert.throws(() => computeBurnRateFromWindow(10, windowMs), (err) => err instanceof RangeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith('windowMs'), String(windowMs))
  }
  assert.throws(() => computeBurnRateFromWindow('10', 1000), (err) => err instanceof TypeError && /consumedTotal/.test(err.message))
})

test('dimensionKeyToString answers what the engine does, and remembers only what it accepted', (t) => {
  const random = rng(0xd1)
  const pick = (list) => list[Math.floor(random() * list.length)]
  const field = (good) => (random() < 0.1 ? pick([...ODD, 'parsecs', '']) : pick(good))
  for (let i = 0; i < 5_000; i++) {
    const key = random() < 0.03 ? pick(ODD) : { poolId: field(['p', 'p:2', 'pool-three', '']), unit: field(['percent', 'requests', 'tokens', 'usd']), window: field(['5h', 'hourly', 'daily', 'weekly', 'monthly']) }
    assert.deepEqual(outcome(() => dimensionKeyToString(key)), outcome(() => native.dimensionKeyToString(key)), `case ${i}: ${String(key?.poolId)} ${String(key?.unit)} ${String(key?.window)}`)
  }
  // Remembered: a key seen before does not reach the engine again.
  const engine = counting(t, 'dimensionKeyToString')
  assert.equal(dimensionKeyToString({ poolId: 'p', unit: 'tokens', window: 'daily' }), 'p:tokens:daily')
  assert.equal(main.dimensionKeyToString({ poolId: 'p', unit: 'tokens', window: 'daily' }), 'p:tokens:daily')
  assert.equal(engine.calls, 0)
  // A rejected field next to remembered ones still throws the engine's error.
  assert.throws(() => dimensionKeyToString({ poolId: 'p', unit: 'parsecs', window: 'daily' }), (err) => err instanceof RangeError && err.message.startsWith('key.unit'))
  assert.throws(() => dimensionKeyToString({ poolId: new String('p'), unit: 'tokens', window: 'daily' }), (err) => err instanceof TypeError && err.message.startsWith('key.poolId'))
  assert.equal(engine.calls, 2)
  // An id longer than 128 characters is answered by the engine each time, never remembered.
  const long = { poolId: 'x'.repeat(129), unit: 'tokens', window: 'daily' }
  assert.equal(dimensionKeyToString(long), `${long.poolId}:tokens:daily`)
  assert.equal(dimensionKeyToString(long), `${long.poolId}:tokens:daily`)
  assert.equal(engine.calls, 4)
})

test('dimensionKeyToString reads each field once and remembers what the engine answered for it', () => {
  let reads = 0
  const shifty = {
    get poolId() {
      return reads++ === 0 ? 'first' : 'second'
    },
    unit: 'usd',
    window: 'weekly',
  }
  assert.equal(dimensionKeyToString(shifty), 'first:usd:weekly')
  assert.equal(reads, 1)
  assert.equal(dimensionKeyToString({ poolId: 'second', unit: 'usd', window: 'weekly' }), 'second:usd:weekly')
})

test('dimensionKeyToString stays right past the bound of remembered pools', () => {
  for (let i = 0; i < 10_000; i++) assert.equal(dimensionKeyToString({ poolId: `pool-${i}`, unit: 'requests', window: '5h' }), `pool-${i}:requests:5h`)
  assert.equal(dimensionKeyToString({ poolId: 'pool-3', unit: 'requests', window: '5h' }), 'pool-3:requests:5h')
})

test('getKnownPlan and knownProviders answer what the engine does, with objects of their own each call', (t) => {
  const providers = knownProviders()
  assert.deepEqual(providers, native.knownProviders())
  providers.push('mine')
  assert.deepEqual(knownProviders(), native.knownProviders())
  for (const provider of [...native.knownProviders(), 'nobody', '', 'openai']) {
    assert.deepEqual(getKnownPlan(provider), native.getKnownPlan(provider), provider)
  }
  for (const odd of ODD.filter((v) => typeof v !== 'string')) {
    assert.deepEqual(outcome(() => getKnownPlan(odd)), outcome(() => native.getKnownPlan(odd)), String(odd))
  }
  const provider = native.knownProviders()[0]
  const first = getKnownPlan(provider)
  first.dimensions[0].limit = -1
  first.dimensions.push({ unit: 'usd', window: 'daily', limit: 1 })
  first.provider = 'changed'
  assert.deepEqual(getKnownPlan(provider), native.getKnownPlan(provider))
  // Remembered: the catalog was asked of the engine once; no provider, known or not, makes
  // it ask again or remember anything more.
  const engine = counting(t, 'getKnownPlan')
  getKnownPlan(provider)
  for (let i = 0; i < 100; i++) assert.equal(getKnownPlan(`nobody-${i}`), null)
  assert.equal(engine.calls, 0)
})

test('two workers and the main thread compute at once', async () => {
  const { Worker } = await import('node:worker_threads')
  const source = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { computeBurnRate } = require(workerData.burnRate)
    const { decideFairShare } = require(workerData.fairShare)
    let wrong = 0
    for (let i = 0; i < 20000; i++) {
      const rate = computeBurnRate([{ ts: 0, consumed: 0 }, { ts: 1000, consumed: i + workerData.offset }])
      if (rate.tokensPerSecond !== i + workerData.offset) wrong++
      const limit = 10 + (i % 7)
      const decision = decideFairShare({ dimensions: [{ key: { poolId: 'w', unit: 'tokens', window: 'daily' }, limit, consumedTotal: limit, globalUsedPercent: 1 }], allocation: { weight: 50, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 })
      if (decision.reason !== 'global-saturated') wrong++
    }
    parentPort.postMessage(wrong)
  `
  const workerData = (offset) => ({ offset, burnRate: require.resolve('@omniroute/quota-engine/compat/burnRate'), fairShare: require.resolve('@omniroute/quota-engine/compat/fairShare') })
  const workers = [1_000_000, 2_000_000].map((offset) => new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData: workerData(offset) })
    worker.once('message', resolve)
    worker.once('error', reject)
  }))
  let wrong = 0
  for (let i = 0; i < 20_000; i++) if (computeBurnRate([{ ts: 0, consumed: 0 }, { ts: 1000, consumed: i }]).tokensPerSecond !== i) wrong++
  assert.deepEqual(await Promise.all(workers), [0, 0])
  assert.equal(wrong, 0)
})

test('Proxies the engine cannot read as arrays are the field\'s error, with its code', () => {
  const { proxy, revoke } = Proxy.revocable([], {})
  revoke()
  assert.deepEqual(outcome(() => computeBurnRate(proxy)), outcome(() => native.computeBurnRate(proxy)))
  assert.throws(() => native.computeBurnRate(proxy), { name: 'TypeError', code: 'ERR_QUOTA_INVALID_ARG' })
  const huge = new Proxy([], { get: (target, key) => (key === 'length' ? 2 ** 32 - 1 : target[key]) })
  assert.throws(() => computeBurnRate(huge), { code: 'ERR_QUOTA_INVALID_ARG' })
  assert.throws(() => native.computeBurnRate(huge), { name: 'RangeError', message: 'history: must have at most 65536 elements, got 4294967295' })
  const notALength = new Proxy([], { get: (target, key) => (key === 'length' ? 1.5 : target[key]) })
  assert.throws(() => native.computeBurnRate(notALength), { name: 'TypeError', message: /^history: .*a length of 1.5/ })
  // A length trap that answers a non-number is said as such, naming the field.
  const text = new Proxy([], { get: (target, key) => (key === 'length' ? '1' : target[key]) })
  assert.throws(() => native.computeBurnRate(text), { code: 'ERR_QUOTA_INVALID_ARG', message: /^history: .*a length that is not a number/ })
})
