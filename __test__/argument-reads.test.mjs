// The edge reads an argument's properties by name through napi-rs
// (docs/architecture.md#the-edge-srcbinding): on every thread, and never through an accessor a
// prototype defines.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'
import { makeDataDir } from './support/store-env.mjs'

const dir = makeDataDir('names')
const require = createRequire(import.meta.url)
const native = require('../binding.js')
const { closeQuotaDb, getSqliteQuotaStore } = require('@omniroute/quota-engine')

after(() => {
  closeQuotaDb()
  fs.rmSync(dir, { recursive: true, force: true })
})

test('a worker thread reads the same values as the main thread', async () => {
  const dim = { poolId: 'names-worker', unit: 'tokens', window: 'daily' }
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads')
     const { getSqliteQuotaStore } = require(workerData.entry)
     const { dimensionKeyToString } = require(workerData.binding)
     const store = getSqliteQuotaStore()
     ;(async () => {
       const keys = Array.from({ length: 10 }, () => dimensionKeyToString(workerData.dim))
       for (let i = 0; i < 10; i++) await store.consume('w', workerData.dim, 2)
       parentPort.postMessage([keys, await store.peek('w', workerData.dim)])
     })()`,
    { eval: true, workerData: { dim, entry: require.resolve('@omniroute/quota-engine'), binding: require.resolve('../binding.js') } },
  )
  const [keys, seen] = await new Promise((resolve, reject) => worker.once('message', resolve).once('error', reject))
  await worker.terminate()
  assert.deepEqual(new Set(keys), new Set(['names-worker:tokens:daily']), "the worker's reads found the right properties")
  assert.equal(seen, 20)
  assert.equal(await getSqliteQuotaStore().peek('w', dim), 20, 'the main thread reads what the worker recorded')
  assert.equal(native.dimensionKeyToString(dim), 'names-worker:tokens:daily')
})

test('an accessor on Object.prototype or Array.prototype never changes which property is read', async () => {
  // In a fresh thread, so that its first property reads meet the accessors; through a
  // native call that runs no JavaScript of Node's own (its timers trip over them).
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads')
     const { dimensionKeyToString } = require(workerData.binding)
     const a = { poolId: 'names-proto-a', unit: 'requests', window: 'hourly' }
     const b = { poolId: 'names-proto-b', unit: 'requests', window: 'hourly' }
     const protos = [Object.prototype, Array.prototype]
     const slots = Array.from({ length: 16 }, (_, i) => String(i))
     for (const proto of protos) {
       for (const i of slots) Object.defineProperty(proto, i, { get() { return 'unit' }, set() {}, configurable: true })
     }
     let seen
     try {
       seen = [dimensionKeyToString(a), dimensionKeyToString(b), dimensionKeyToString(a)]
     } catch (err) {
       seen = String(err)
     } finally {
       for (const proto of protos) for (const i of slots) delete proto[i]
     }
     parentPort.postMessage(seen)`,
    { eval: true, workerData: { binding: require.resolve('../binding.js') } },
  )
  const seen = await new Promise((resolve, reject) => worker.once('message', resolve).once('error', reject))
  await worker.terminate()
  assert.deepEqual(seen, ['names-proto-a:requests:hourly', 'names-proto-b:requests:hourly', 'names-proto-a:requests:hourly'], 'each read found its own property')
})

test('an array is read element by element, at most 65,536 of them: its length costs the caller nothing', () => {
  const { decideFairShare, computeBurnRate, createPool, listPools, upsertProviderPlan, getProviderPlan } = require('@omniroute/quota-engine')
  const pools = listPools().total
  // `new Array(2 ** 32 - 1)` is four billion holes for free: refused by its length at once,
  // before a single element is read (reading them would take minutes and gigabytes).
  for (const length of [2 ** 32 - 1, 65_537]) {
    const holes = new Array(length)
    const tooLong = { name: 'RangeError', code: 'ERR_QUOTA_INVALID_ARG', message: `input.dimensions: must have at most 65536 elements, got ${length}` }
    assert.throws(() => decideFairShare({ dimensions: holes, allocation: { weight: 1, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }), tooLong)
    assert.throws(() => computeBurnRate(holes), { name: 'RangeError', message: `history: must have at most 65536 elements, got ${length}` })
    assert.throws(() => createPool({ connectionId: 'arrays', name: 'holes', allocations: holes }), { name: 'RangeError', message: /^input\.allocations: must have at most 65536 elements/ })
    assert.throws(() => upsertProviderPlan({ connectionId: 'arrays', provider: 'p', dimensions: holes, source: 'manual' }), { name: 'RangeError', message: /^plan\.dimensions: must have at most 65536 elements/ })
  }
  // Within the bound, the first hole ends the read with its path.
  const hole = { name: 'TypeError', code: 'ERR_QUOTA_INVALID_ARG' }
  assert.throws(() => computeBurnRate(new Array(65_536)), { ...hole, message: 'history[0]: expected an object, got undefined' })
  assert.throws(() => createPool({ connectionId: 'arrays', name: 'holes', allocations: new Array(3) }), { ...hole, message: /^input\.allocations\[0\]: expected an object, got undefined/ })
  const samples = Array.from({ length: 65_536 }, (_, i) => ({ ts: i * 1000, consumed: i }))
  assert.equal(computeBurnRate(samples, 10).tokensPerSecond, 1)
  // Nothing was written by the refused calls.
  assert.equal(listPools().total, pools)
  assert.equal(getProviderPlan('arrays'), null)
})
