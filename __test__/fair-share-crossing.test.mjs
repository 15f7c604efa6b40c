// decideFairShare's one crossing, the engine's checked entry (docs/api.md#the-pure-functions):
// malformed input is the error naming the field; long inputs, many pool ids and several JS
// threads decide right.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { decideFairShare } from '@omniroute/quota-engine/compat/fairShare'

const require = createRequire(import.meta.url)
const native = require('../lib/native.js')

test('malformed input names the field', () => {
  const input = { dimensions: [{ key: { poolId: 'p', unit: 'tokens', window: 'daily' }, limit: '10', consumedTotal: 0, globalUsedPercent: 0 }], allocation: { weight: 1, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }
  assert.throws(() => decideFairShare(input), (err) => err instanceof TypeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith('input.dimensions[0].limit'))
  input.dimensions[0].limit = 10
  input.dimensions[0].key.unit = 'parsecs'
  assert.throws(() => decideFairShare(input), (err) => err instanceof RangeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.includes('input.dimensions[0].key.unit'))
})

test('forty dimensions are decided, the same as the engine\'s entry', () => {
  const dimensions = Array.from({ length: 40 }, (_, i) => ({ key: { poolId: 'p', unit: 'requests', window: 'hourly' }, limit: 100, consumedTotal: i === 39 ? 100 : 0, globalUsedPercent: 0 }))
  const input = { dimensions, allocation: { weight: 10, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }
  assert.deepEqual(decideFairShare(input), native.decideFairShare(input))
  assert.equal(decideFairShare(input).reason, 'global-saturated')
})

test('many distinct pool ids decide correctly', () => {
  for (let i = 0; i < 10_000; i++) {
    const key = { poolId: `pool-${i}`, unit: 'tokens', window: 'daily' }
    const input = { dimensions: [{ key, limit: 100, consumedTotal: 50, globalUsedPercent: 0.9 }], allocation: { weight: 10, policy: 'hard' }, consumedByThisKey: { [`pool-${i}:tokens:daily`]: i % 2 ? 10 : 9 }, saturationThreshold: 0.5 }
    assert.equal(decideFairShare(input).kind, i % 2 ? 'block' : 'allow')
  }
})

test('a worker and the main thread decide side by side', async () => {
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
