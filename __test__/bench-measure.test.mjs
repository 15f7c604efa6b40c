// bench/measure.mjs: what a measured window holds. A side whose work is deferred (the
// engine's buffered SQLite consume commits by time) hands `finish`, which runs after the
// warm-up, outside the window, and again inside it, after the last call: each window then
// pays for the commit of exactly its own calls (docs/benchmarks.md).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { measurer, medianRound } from '../bench/measure.mjs'

test('serial(fn, finish): warm-up, finish (not timed), the timed calls, finish (timed)', async () => {
  const seen = []
  const { serial } = measurer({ maxOps: 5, maxMs: 60_000, warmup: 3, concurrency: 4 })
  const result = await serial(
    async (i) => seen.push(`fn ${i}`),
    async () => seen.push('finish'),
  )
  assert.deepEqual(seen, ['fn 0', 'fn 1', 'fn 2', 'finish', 'fn 0', 'fn 1', 'fn 2', 'fn 3', 'fn 4', 'finish'])
  assert.ok(result.opsPerSec > 0)
})

test('serial(fn) without finish measures as before', async () => {
  const seen = []
  const { serial } = measurer({ maxOps: 2, maxMs: 60_000, warmup: 1, concurrency: 4 })
  await serial(async (i) => seen.push(i))
  assert.deepEqual(seen, [0, 0, 1])
})

test('medianRound reports the round of the median ratio and the spread, whatever the order', () => {
  const rounds = [0.9, 0.7, 1.0, 0.8, 0.75].map((ratio, i) => ({ ratio, id: i }))
  const { median, lowest, highest } = medianRound(rounds)
  assert.equal(median.id, 3) // ratio 0.8
  assert.equal(lowest, 0.7)
  assert.equal(highest, 1.0)
  assert.deepEqual(rounds.map((r) => r.id), [0, 1, 2, 3, 4]) // the caller's list is left as it was
  assert.equal(medianRound([{ ratio: 0.5 }]).median.ratio, 0.5)
})

test('medianRound(rounds, by) picks by the named field', () => {
  const rounds = [7.5, 2.5, 12, 4].map((share, i) => ({ share, ratio: -i, id: i }))
  const { median, lowest, highest } = medianRound(rounds, 'share')
  assert.equal(median.id, 0) // 2.5 4 [7.5] 12: the upper of the two middle ones
  assert.equal(lowest, 2.5)
  assert.equal(highest, 12)
})
