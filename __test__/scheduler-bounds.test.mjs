// The bound on the scheduler's names (issue 15 item 8; docs/scheduler.md "A bound on
// names"): 10⁶ distinct connection ids, execution keys and combo names driven through
// selectQuotaShareTarget and incrementInflight leave at most QUOTA_SCHEDULER_MAX_IDS names
// natively and in this isolate's caches, with their state; names still in use keep theirs,
// and a cached targets array whose symbols were evicted still selects correctly.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import v8 from 'node:v8'
import vm from 'node:vm'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const { selectQuotaShareTarget, _getDrrDeficitForTest } = require('@omniroute/quota-engine')
const { incrementInflight, getInflight } = require('@omniroute/quota-engine/compat/quotaShareInflight')
const { _getQuotaShareCacheSizesForTest } = require('../lib/quotaShareStrategy.js')
const { _getSchedulerSizesForTest } = require('../binding.js')

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc')
const MiB = 1024 * 1024
const BOUND = 100_000 // the documented default of QUOTA_SCHEDULER_MAX_IDS
const T0 = 1_700_000_000_000

test('10⁶ distinct names stay within QUOTA_SCHEDULER_MAX_IDS, natively and in the JS caches', () => {
  delete process.env.QUOTA_SCHEDULER_MAX_IDS
  // Selected from twice: the shell keeps this array's extraction (its symbols) cached.
  const early = [{ executionKey: 'early-a', connectionId: 'early-conn' }, { executionKey: 'early-b' }]
  selectQuotaShareTarget(early, 'early-combo', 'm', T0).decrementInflight()
  selectQuotaShareTarget(early, 'early-combo', 'm', T0).decrementInflight()
  const hot = { executionKey: 'hot', connectionId: 'hot-conn', weight: 1 }
  incrementInflight('held', 1e12, T0) // a lease whose name is never used again

  gc()
  const before = process.memoryUsage()
  let names = 0
  let i = 0
  for (; names < 1_000_000; i++) {
    const combo = i % 2 ? 'big' : `combo-${i}`
    const r = selectQuotaShareTarget([{ executionKey: `e${i}`, connectionId: `c${i}`, weight: 1 }, hot], combo, 'm', T0 + i)
    r.decrementInflight()
    incrementInflight(`x${i}`, 1e12, T0) // never expires, never released
    if (i % 1000 === 0) incrementInflight('hot-lease', 1e12, T0) // used now and then: stays
    names += i % 2 ? 3 : 4
  }
  const sizes = _getSchedulerSizesForTest()
  const caches = _getQuotaShareCacheSizesForTest()
  gc()
  const after = process.memoryUsage()

  assert.ok(sizes.symbols <= BOUND, `native names ${sizes.symbols}`)
  assert.ok(sizes.inflight <= BOUND, `in-flight slots ${sizes.inflight}`)
  assert.ok(sizes.drrKeys <= BOUND, `DRR deficits ${sizes.drrKeys}`)
  assert.ok(sizes.drrCombos <= 200, `DRR combos ${sizes.drrCombos}`)
  assert.ok(caches.symbols <= BOUND && caches.targets <= BOUND, `JS caches ${JSON.stringify(caches)}`)
  // Generous: unbounded, 10⁶ names kept > 150 MiB of heap and > 1 GiB of RSS.
  const heap = (after.heapUsed - before.heapUsed) / MiB
  const rss = (after.rss - before.rss) / MiB
  assert.ok(heap < 48, `heap grew ${heap.toFixed(1)} MiB`)
  assert.ok(rss < 256, `RSS grew ${rss.toFixed(1)} MiB`)

  // Recently used names keep their state; the oldest lost theirs with their names.
  assert.equal(getInflight('hot-lease', T0), Math.ceil(i / 1000))
  assert.equal(getInflight('held', T0), 0, 'evicted with its name')
  assert.equal(getInflight('x0', T0), 0)
  assert.notEqual(_getDrrDeficitForTest('big', 'hot'), 0)

  // The cached array's symbols were evicted: the selection re-interns and still works.
  const r = selectQuotaShareTarget(early, 'early-combo', 'm', T0)
  assert.ok(r.target === early[0] || r.target === early[1])
  assert.deepEqual(new Set(r.orderedTargets), new Set(early))
  r.decrementInflight()
  assert.equal(getInflight('early-conn', T0), 0)
  const again = selectQuotaShareTarget(early, 'early-combo', 'm', T0)
  assert.notEqual(again.target, r.target, 'DRR alternates again within the re-interned combo')
  again.decrementInflight()
})
