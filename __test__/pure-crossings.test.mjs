// The pure calls' cheap ways in (docs/api.md#the-pure-functions): computeBurnRate and
// computeBurnRateFromWindow pack well-formed input into one Float64Array (lib/burnRate.js);
// dimensionKeyToString and the plan catalog remember the engine's answers (lib/dimensionKey.js,
// lib/plans.js). Whatever the input, each answers exactly what the engine's checked entry
// answers — the same value, or the same error — so the cheap way can never change an answer
// or hide a field's error. (Getters with side effects are read once per field, in the glue's
// order: docs/api.md#the-pure-functions.)
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
const NUMBERS = [0, -0, 1, -1, 0.5, 1e308, -1e308, NaN, Infinity, -Infinity, 3_600_000, 1_700_000_000_000]

// For failure messages: JSON with the values JSON cannot say (10n, a symbol) as text.
const show = (value) => JSON.stringify(value, (_, v) => (typeof v === 'bigint' || typeof v === 'symbol' ? String(v) : v))

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
  native[name] = (...args) => (counter.calls++, entry(...args))
  t.after(() => (native[name] = entry))
  return counter
}

function historyFor(random) {
  const pick = (list) => list[Math.floor(random() * list.length)]
  const number = () => (random() < 0.15 ? pick(NUMBERS) : Math.round(random() * 1e6) / 100)
  const count = Math.floor(random() * 12)
  const history = []
  let ts = 1_700_000_000_000
  for (let i = 0; i < count; i++) {
    ts += random() < 0.2 ? -Math.floor(random() * 2000) : Math.floor(random() * 5000)
    history.push({ ts: random() < 0.05 ? pick(NUMBERS) : ts, consumed: number() })
  }
  let remaining = random() < 0.3 ? undefined : random() < 0.2 ? pick([null, ...NUMBERS]) : number()
  // One time in four, something odd: a wrong type, a missing field, a hole.
  if (random() < 0.25) {
    const odd = pick(ODD)
    const places = [() => (remaining = odd), () => history.push(odd)]
    if (history.length) {
      const sample = pick(history)
      places.push(() => (sample.ts = odd), () => (sample.consumed = odd), () => delete sample.consumed, () => (history[0] = odd))
    }
    pick(places)()
  }
  return { history: random() < 0.02 ? pick(ODD) : history, remaining }
}

test('computeBurnRate answers exactly what the checked entry answers (20 000 generated inputs)', () => {
  const random = rng(0xb12e)
  let computed = 0
  for (let i = 0; i < 20_000; i++) {
    const { history, remaining } = historyFor(random)
    const expected = outcome(() => native.computeBurnRate(history, remaining))
    const actual = outcome(() => computeBurnRate(history, remaining))
    assert.deepEqual(actual, expected, `case ${i}: ${String(remaining)} ${show(history)}`)
    if (expected.value) {
      assert.deepEqual(Object.keys(actual.value), ['tokensPerSecond', 'timeToExhaustionMs'])
      computed++
    }
  }
  assert.ok(computed > 14_000, `only ${computed} cases computed`)
})

test('a well-formed history takes the packed crossing; anything else the checked entry', (t) => {
  const checked = counting(t, 'computeBurnRate')
  const history = [{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 10 }, { ts: 2000, consumed: 30 }]
  assert.deepEqual(computeBurnRate(history, 130), { tokensPerSecond: 13, timeToExhaustionMs: 10_000 })
  assert.deepEqual(computeBurnRate(history), { tokensPerSecond: 13, timeToExhaustionMs: null })
  assert.deepEqual(computeBurnRate([], null), { tokensPerSecond: 0, timeToExhaustionMs: null })
  assert.equal(checked.calls, 0)
  assert.throws(() => computeBurnRate([{ ts: 0, consumed: '1' }]), (err) => err instanceof TypeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith('history[0].consumed'))
  assert.throws(() => computeBurnRate(history, 'x'), (err) => err instanceof TypeError && /remaining/.test(err.message))
  assert.equal(checked.calls, 2)
})

test('a history longer than the packed buffer is computed the checked way, the same', (t) => {
  // The glue's own crossing: asked again, the engine gives this thread's same buffer.
  const { maxSamples } = native.__burnRateCrossing()
  const history = Array.from({ length: maxSamples + 5 }, (_, i) => ({ ts: i * 1000, consumed: i * i }))
  const checked = counting(t, 'computeBurnRate')
  assert.deepEqual(computeBurnRate(history, 50), native.computeBurnRate(history, 50))
  assert.equal(checked.calls, 2) // once through the glue, once here
  assert.deepEqual(computeBurnRate(history.slice(0, maxSamples), 50), native.computeBurnRate(history.slice(0, maxSamples), 50))
  assert.equal(checked.calls, 3)
})

test('a sample whose getter computes a burn rate of its own gets both answers right', () => {
  const inner = [{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 500 }]
  let innerRate = null
  const history = [
    { ts: 0, consumed: 0 },
    {
      get ts() {
        innerRate = computeBurnRate(inner)
        return 1000
      },
      consumed: 10,
    },
  ]
  assert.deepEqual(computeBurnRate(history, 20), { tokensPerSecond: 10, timeToExhaustionMs: 2000 })
  assert.deepEqual(innerRate, { tokensPerSecond: 500, timeToExhaustionMs: null })
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

test('a getter computing a window rate while a history is packed leaves that history alone', () => {
  const history = () => [{ ts: 0, consumed: 0 }, { get ts() { computeBurnRateFromWindow(50, 3_600_000); return 1000 }, consumed: 10 }]
  assert.deepEqual(computeBurnRate(history(), 100), { tokensPerSecond: 10, timeToExhaustionMs: 10_000 })
  assert.deepEqual(computeBurnRate(history(), 100), native.computeBurnRate(history(), 100))
})

test('a Proxy of an array is an array, to the glue and to the checked entry alike', () => {
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

test('the packing buffers are the engine\'s memory: detached or transferred, the answers stay right', async () => {
  // In a worker, since a detached buffer sends that thread's calls the checked way for good.
  const { Worker } = await import('node:worker_threads')
  const source = `
    const { parentPort, workerData } = require('node:worker_threads')
    const native = require(workerData.native)
    const { computeBurnRate, computeBurnRateFromWindow } = require(workerData.burnRate)
    const { decideFairShare } = require(workerData.fairShare)
    const crossing = native.__burnRateCrossing()
    const history = [{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 5 }]
    const before = computeBurnRate(history, 10)
    // Handed to another owner: this thread's view is detached; the engine's memory is not.
    structuredClone(crossing.historyBuffer.buffer, { transfer: [crossing.historyBuffer.buffer] })
    const { port1 } = new MessageChannel()
    port1.postMessage(crossing.windowBuffer.buffer, [crossing.windowBuffer.buffer])
    port1.close()
    const fair = native.__fairShareCrossing()
    structuredClone(fair.buffer.buffer, { transfer: [fair.buffer.buffer] })
    crossing.fromHistory() // the engine computes in its own memory: no crash
    const after = computeBurnRate(history, 10)
    const window = computeBurnRateFromWindow(3, 1, 6000)
    const decision = decideFairShare({ dimensions: [{ key: { poolId: 'p', unit: 'tokens', window: 'daily' }, limit: 10, consumedTotal: 10, globalUsedPercent: 1 }], allocation: { weight: 50, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 })
    parentPort.postMessage({ before, after, window, decision, lengths: [crossing.historyBuffer.length, crossing.windowBuffer.length, fair.buffer.length], full: [2 + 2 * crossing.maxSamples + 1, 3] })
  `
  const workerData = { native: require.resolve('../lib/native.js'), burnRate: require.resolve('../lib/burnRate.js'), fairShare: require.resolve('../lib/fairShare.js') }
  const result = await new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData })
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  assert.deepEqual(result.before, { tokensPerSecond: 5, timeToExhaustionMs: 2000 })
  assert.deepEqual(result.after, result.before)
  assert.deepEqual(result.window, { tokensPerSecond: 3000, timeToExhaustionMs: 2000 })
  assert.deepEqual(result.decision, { kind: 'block', reason: 'global-saturated' })
  // Whether the runtime detaches an external buffer on transfer (Node 20 does not): either
  // way each view is whole or empty, never a view of freed memory.
  assert.ok([0, result.full[0]].includes(result.lengths[0]) && [0, 3].includes(result.lengths[1]), String(result.lengths))
  // This thread's buffers were not touched.
  assert.deepEqual(computeBurnRate([{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 7 }]), { tokensPerSecond: 7, timeToExhaustionMs: null })
})

test('a second copy of the glue called from inside the first one\'s packing answers both right', () => {
  const paths = ['../lib/burnRate.js', '../lib/fairShare.js'].map((p) => require.resolve(p))
  const first = paths.map((p) => require(p))
  for (const p of paths) delete require.cache[p]
  const [burnRate, fairShare] = paths.map((p) => require(p))
  const dim = () => ({ key: { poolId: 'p', unit: 'tokens', window: 'daily' }, limit: 10, consumedTotal: 9.5, globalUsedPercent: 0.99 })
  const blocking = (during) => {
    const second = dim()
    Object.defineProperty(second, 'limit', { get: () => (during(), 10) })
    return { dimensions: [dim(), second], allocation: { weight: 1, policy: 'hard' }, consumedByThisKey: { 'p:tokens:daily': 9 }, saturationThreshold: 0.5 }
  }
  const nested = () => fairShare.decideFairShare({ dimensions: [], allocation: { weight: 50, policy: 'soft' }, saturationThreshold: 0.5 })
  assert.deepEqual(first[1].decideFairShare(blocking(nested)), { kind: 'block', reason: 'fair-share' })
  const history = [{ ts: 0, consumed: 0 }, { get ts() { burnRate.computeBurnRate([{ ts: 0, consumed: 0 }, { ts: 10, consumed: 99 }]); return 1000 }, consumed: 13 }]
  assert.deepEqual(first[0].computeBurnRate(history, 13), { tokensPerSecond: 13, timeToExhaustionMs: 1000 })
})

test('computeBurnRateFromWindow answers exactly what the checked entry answers (5 000 generated inputs)', () => {
  const random = rng(0xf00d)
  const pick = (list) => list[Math.floor(random() * list.length)]
  const any = () => (random() < 0.1 ? pick(ODD) : random() < 0.3 ? pick(NUMBERS) : Math.round(random() * 1e7) / 10)
  for (let i = 0; i < 5_000; i++) {
    const args = [any(), random() < 0.5 ? pick([1, 1.5, 60_000, 3_600_000, 18_000_000]) : any(), random() < 0.3 ? undefined : any()]
    // The rate depends on the clock: the answer is the checked one from just before or just
    // after it (tried again in the rare case the clock moved twice in between).
    let agreed = false
    let seen
    for (let attempt = 0; attempt < 3 && !agreed; attempt++) {
      const before = outcome(() => native.computeBurnRateFromWindow(...args))
      const actual = outcome(() => computeBurnRateFromWindow(...args))
      const after = outcome(() => native.computeBurnRateFromWindow(...args))
      seen = { before, actual, after }
      agreed = [before, after].some((expected) => {
        try {
          assert.deepEqual(actual, expected)
          return true
        } catch {
          return false
        }
      })
    }
    assert.ok(agreed, `case ${i}: ${args.map(String)} → ${show(seen)}`)
  }
})

test('computeBurnRateFromWindow: a window of 1 ms is clock-free; a bad window is the checked RangeError', (t) => {
  const checked = counting(t, 'computeBurnRateFromWindow')
  // now mod 1 is always 0, counted as 1 ms.
  assert.deepEqual(computeBurnRateFromWindow(3, 1, 6000), { tokensPerSecond: 3000, timeToExhaustionMs: 2000 })
  assert.deepEqual(computeBurnRateFromWindow(0, 1, 6000), { tokensPerSecond: 0, timeToExhaustionMs: null })
  assert.equal(checked.calls, 0)
  for (const windowMs of [0, 0.5, -1, NaN, Infinity]) {
    assert.throws(() => computeBurnRateFromWindow(10, windowMs), (err) => err instanceof RangeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith('windowMs'), String(windowMs))
  }
  assert.throws(() => computeBurnRateFromWindow('10', 1000), (err) => err instanceof TypeError && /consumedTotal/.test(err.message))
  assert.equal(checked.calls, 6)
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

test('each thread packs into a buffer of its own: two workers and the main thread at once', async () => {
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

test('the glue loaded again (a test runner resetting its modules) and the first copy both stay right', () => {
  const paths = ['../lib/burnRate.js', '../lib/fairShare.js'].map((p) => require.resolve(p))
  const first = paths.map((p) => require(p))
  for (const p of paths) delete require.cache[p]
  const second = paths.map((p) => require(p))
  assert.notEqual(first[0], second[0])
  const input = (limit) => ({ dimensions: [{ key: { poolId: 'reset', unit: 'tokens', window: 'daily' }, limit, consumedTotal: 5, globalUsedPercent: 1 }], allocation: { weight: 50, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 })
  for (let i = 1; i <= 50; i++) {
    for (const [burnRate, fairShare] of [first, second]) {
      assert.equal(burnRate.computeBurnRate([{ ts: 0, consumed: 0 }, { ts: 1000, consumed: i }]).tokensPerSecond, i)
      assert.equal(fairShare.decideFairShare(input(i % 2 ? 5 : 50)).reason, i % 2 ? 'global-saturated' : 'ok')
    }
  }
})

test('a nested call the caller slips in anywhere before the crossing cannot change the outer answer', () => {
  // Even through a built-in getter the caller replaced: the typed arrays' own `length`.
  const proto = Object.getPrototypeOf(Float64Array.prototype)
  const original = Object.getOwnPropertyDescriptor(proto, 'length')
  const allow = { dimensions: [], allocation: { weight: 50, policy: 'soft' }, saturationThreshold: 0.5 }
  const block = { dimensions: [{ key: { poolId: 'p', unit: 'tokens', window: 'daily' }, limit: 10, consumedTotal: 10, globalUsedPercent: 1 }], allocation: { weight: 50, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }
  let nested = 0
  Object.defineProperty(proto, 'length', {
    configurable: true,
    get() {
      if (nested++ < 50) {
        main.decideFairShare(allow)
        computeBurnRate([{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 1 }])
      }
      return original.get.call(this)
    },
  })
  try {
    for (let i = 0; i < 5; i++) {
      assert.deepEqual(main.decideFairShare(block), { kind: 'block', reason: 'global-saturated' })
      assert.deepEqual(computeBurnRate([{ ts: 0, consumed: 0 }, { ts: 1000, consumed: 9 }]), { tokensPerSecond: 9, timeToExhaustionMs: null })
    }
  } finally {
    Object.defineProperty(proto, 'length', original)
  }
})

test('a packing cut short (a vm timeout in a getter) leaves every later call on the packed way', async (t) => {
  const vm = await import('node:vm')
  assert.throws(() => vm.runInNewContext('computeBurnRate([{ ts: 0, consumed: 0 }, { get ts() { for (;;); } }])', { computeBurnRate }, { timeout: 50 }), { code: 'ERR_SCRIPT_EXECUTION_TIMEOUT' })
  const checked = counting(t, 'computeBurnRate')
  for (let i = 0; i < 100; i++) computeBurnRate([{ ts: 0, consumed: 0 }, { ts: 1000, consumed: i }])
  assert.equal(checked.calls, 0)
})

test('Proxies the engine cannot read as arrays are the field\'s error, with its code', () => {
  const { proxy, revoke } = Proxy.revocable([], {})
  revoke()
  assert.deepEqual(outcome(() => computeBurnRate(proxy)), outcome(() => native.computeBurnRate(proxy)))
  assert.throws(() => native.computeBurnRate(proxy), { name: 'TypeError', code: 'ERR_QUOTA_INVALID_ARG' })
  const huge = new Proxy([], { get: (target, key) => (key === 'length' ? 2 ** 32 - 1 : target[key]) })
  assert.throws(() => computeBurnRate(huge), { code: 'ERR_QUOTA_INVALID_ARG' })
  assert.throws(() => native.computeBurnRate(huge), { message: /^history: .*a length of 4294967295/ })
  // A length trap that answers a non-number is said as such, naming the field.
  const text = new Proxy([], { get: (target, key) => (key === 'length' ? '1' : target[key]) })
  assert.throws(() => native.computeBurnRate(text), { code: 'ERR_QUOTA_INVALID_ARG', message: /^history: .*a length that is not a number/ })
})
