// Differential test: over seeded random scenarios the native selection makes exactly the
// choices of bench/baseline/quotaShareStrategy.js — a plain-JavaScript reading of docs/contract.md
// §10 — with the same in-flight counts and DRR deficits afterwards, while the targets
// arrays are reused, alternated, and changed in place (the JavaScript side caches what it
// read from an array, so this also checks that a change is always seen). Deterministic: the
// clock is injected and the random source is seeded.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import * as strategy from '@omniroute/quota-engine/compat/quotaShareStrategy'
import * as inflight from '@omniroute/quota-engine/compat/quotaShareInflight'
import * as buckets from '@omniroute/quota-engine/compat/accountBuckets'

const require = createRequire(import.meta.url)
const baseline = require('../bench/baseline/quotaShareStrategy.js')

const native = {
  select: strategy.selectQuotaShareTarget,
  incrementInflight: inflight.incrementInflight,
  getInflight: inflight.getInflight,
  recordUsage: buckets.recordUsage,
  deficit: strategy._getDrrDeficitForTest,
  reset() {
    strategy._clearDrrStateForTest()
    inflight._clearInflightForTest()
    buckets._clearBucketsForTest()
  },
}
const reference = {
  select: baseline.selectQuotaShareTarget,
  incrementInflight: baseline.incrementInflight,
  getInflight: baseline.getInflight,
  recordUsage: baseline.recordUsage,
  deficit: baseline._getDrrDeficitForTest,
  reset: baseline._clearForBench,
}

/** mulberry32: a small seeded PRNG. */
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const T0 = 1_700_000_000_000
const MODELS = ['claude/opus-4', 'claude/sonnet-4', 'opus-4', undefined]
const WINDOWS = ['5h', '7d', '7d:opus-4', '7d:sonnet-4']
const WEIGHTS = [1, 1, 2, 3, 0.5, 10, 0, -1, NaN, undefined, '2']

function scenario(seed) {
  const rand = random(seed)
  const pick = (list) => list[Math.floor(rand() * list.length)]
  const connectionCount = 1 + Math.floor(rand() * 6)
  const connections = Array.from({ length: connectionCount }, (_, i) => `conn-${seed}-${i}`)
  const combos = Array.from({ length: 1 + Math.floor(rand() * 3) }, (_, i) => `combo-${seed}-${i}`)
  const targetSets = combos.map((combo) =>
    Array.from({ length: 1 + Math.floor(rand() * 8) }, (_, i) => ({
      executionKey: `${combo}:${i}`,
      connectionId: rand() < 0.1 ? undefined : pick(connections),
      weight: pick(WEIGHTS),
    })),
  )
  for (const side of [native, reference]) side.reset()
  const log = []
  let now = T0
  let lastIndex = 0
  for (let step = 0; step < 60; step++) {
    now += rand() < 0.1 ? 130_000 : Math.floor(rand() * 2000)
    const action = rand()
    if (action < 0.15) {
      const args = [pick(connections), pick(WINDOWS), pick([100, 120, 50, NaN]), rand() < 0.3 ? null : new Date(now + Math.floor(rand() * 20_000) - 5000).toISOString(), now]
      native.recordUsage(...args)
      reference.recordUsage(...args)
      log.push(`recordUsage ${args.join(' ')}`)
      continue
    }
    if (action < 0.2) {
      // The host may change its targets in place; the native side must see it.
      const targets = pick(targetSets)
      const change = rand()
      const i = Math.floor(rand() * targets.length)
      if (change < 0.3) targets[i].weight = pick(WEIGHTS)
      else if (change < 0.5) targets[i].connectionId = rand() < 0.1 ? null : pick(connections)
      else if (change < 0.7) targets[i] = { ...targets[i], weight: pick(WEIGHTS) }
      else if (change < 0.85 && targets.length > 1) targets.pop()
      // A key given twice (another connection, say): dispatched once.
      else if (change < 0.92) targets.push({ ...pick(targets), connectionId: pick(connections) })
      else targets.push({ executionKey: `${targets[0].executionKey}+${step}`, connectionId: pick(connections), weight: pick(WEIGHTS) })
      log.push(`mutate ${JSON.stringify(targets)}`)
      continue
    }
    if (action < 0.3) {
      const args = [pick(connections), Math.floor(rand() * 200_000), now]
      assert.equal(native.incrementInflight(...args), reference.incrementInflight(...args), `seed ${seed} step ${step}: incrementInflight`)
      continue
    }
    const index = rand() < 0.5 ? lastIndex : Math.floor(rand() * combos.length)
    lastIndex = index
    const targets = targetSets[index]
    const model = pick(MODELS)
    const caps = rand() < 0.5 ? new Map(connections.map((id) => [id, pick([1, 2, 3, null, 0, NaN])])) : undefined
    const options = caps ? { maxConcurrentByConnection: caps } : undefined
    const a = native.select(targets, combos[index], model, now, options)
    const b = reference.select(targets, combos[index], model, now, options)
    const order = (result) => result.orderedTargets.map((t) => targets.indexOf(t)).join(',')
    log.push(`select ${combos[index]} ${model} → ${order(b)}`)
    assert.equal(order(a), order(b), `seed ${seed} step ${step}: orders differ\n${log.join('\n')}`)
    assert.equal(a.target, b.target)
    if (rand() < 0.7) {
      a.decrementInflight()
      b.decrementInflight()
    }
    for (const id of connections) assert.equal(native.getInflight(id, now), reference.getInflight(id, now), `seed ${seed} step ${step}: in flight on ${id}`)
    for (const target of targets) {
      assert.equal(native.deficit(combos[index], target.executionKey), reference.deficit(combos[index], target.executionKey), `seed ${seed} step ${step}: deficit of ${target.executionKey}`)
    }
  }
}

test('the native selection matches the plain-JavaScript reading of §10 on 500 random scenarios', () => {
  for (let seed = 1; seed <= 500; seed++) scenario(seed)
})
