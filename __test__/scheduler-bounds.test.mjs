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
import { Worker } from 'node:worker_threads'

const require = createRequire(import.meta.url)
const { selectQuotaShareTarget, _getDrrDeficitForTest } = require('@omniroute/quota-engine')
const { incrementInflight, getInflight } = require('@omniroute/quota-engine/compat/quotaShareInflight')
const { _getQuotaShareCacheSizesForTest } = require('../lib/quotaShareStrategy.js')
const { __schedulerSizesForTests } = require('../binding.js')

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
  const sizes = __schedulerSizesForTests()
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

// A worker's cached symbols for names the main thread's traffic evicted: its next
// selection re-interns (no symbol aliases the new names that took the freed slots), and
// both threads see one state.
test('a worker isolate whose cached symbols were evicted re-interns; no symbol aliases another name', async () => {
  process.env.QUOTA_SCHEDULER_MAX_IDS = '1000' // the minimum: evictions after 1 000 names
  const source = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { selectQuotaShareTarget } = require(workerData.entry)
    const { getInflight } = require(workerData.inflight)
    const { _getQuotaShareCacheSizesForTest } = require(workerData.lib)
    const targets = [{ executionKey: 'w-x', connectionId: 'w-conn-x' }, { executionKey: 'w-y', connectionId: 'w-conn-y' }]
    parentPort.on('message', (step) => {
      if (step === 'drive') {
        for (let i = 0; i < 5000; i++) selectQuotaShareTarget([{ executionKey: 'wk' + i, connectionId: 'wc' + i }, targets[0]], 'w-big', 'm', 1).decrementInflight()
        parentPort.postMessage(_getQuotaShareCacheSizesForTest())
        return
      }
      const r = selectQuotaShareTarget(targets, 'w-combo', 'm', 1) // held, not released
      parentPort.postMessage({ winner: r.target.executionKey, x: getInflight('w-conn-x', 1), y: getInflight('w-conn-y', 1) })
    })`
  const worker = new Worker(source, {
    eval: true,
    workerData: {
      entry: require.resolve('@omniroute/quota-engine'),
      inflight: require.resolve('@omniroute/quota-engine/compat/quotaShareInflight'),
      lib: require.resolve('../lib/quotaShareStrategy.js'),
    },
  })
  const ask = (step) => new Promise((resolve, reject) => { worker.once('message', resolve); worker.once('error', reject); worker.postMessage(step) })
  try {
    const first = await ask('select')
    const second = await ask('select') // the worker now caches this array's extraction
    assert.deepEqual([first.x + first.y, second.x, second.y], [1, 1, 1], 'one lease on each connection')
    // The main thread's traffic evicts every name the worker used; their slots are reused.
    for (let i = 0; i < 5000; i++) {
      selectQuotaShareTarget([{ executionKey: `m${i}`, connectionId: `mc${i}` }, { executionKey: `n${i}` }], `mcombo${i}`, 'm', T0).decrementInflight()
      incrementInflight(`mx${i}`, 1e12, T0)
    }
    // Fill the table exactly: then every slot is live, the worker's old slots included,
    // each now holding another name (a symbol without a generation would alias it).
    for (let j = 0; __schedulerSizesForTests().symbols < 1000; j++) incrementInflight(`fill${j}`, 1e12, T0)
    assert.equal(__schedulerSizesForTests().symbols, 1000)
    assert.equal(getInflight('w-conn-x', 1) + getInflight('w-conn-y', 1), 0, 'evicted with their names')
    const third = await ask('select')
    // The lease lands on the worker's own connection, not on a name that took its old slot.
    assert.equal(third.x + third.y, 1, JSON.stringify(third))
    assert.equal(getInflight(third.winner === 'w-x' ? 'w-conn-x' : 'w-conn-y', 1), 1, 'seen by the main thread too')
    const fourth = await ask('select')
    assert.notEqual(fourth.winner, third.winner, 'DRR alternates in the re-interned combo')
    const caches = await ask('drive')
    assert.ok(caches.symbols <= 1000 && caches.targets <= 1000, JSON.stringify(caches))
    assert.ok(__schedulerSizesForTests().symbols <= 1000)
  } finally {
    await worker.terminate()
    delete process.env.QUOTA_SCHEDULER_MAX_IDS
  }
})

// A selection refused because its names do not fit the bound interns none of them: the
// state of the names already kept — another request's lease, a combo's deficits — stays.
test('a selection naming more than QUOTA_SCHEDULER_MAX_IDS names is refused before it interns any', () => {
  process.env.QUOTA_SCHEDULER_MAX_IDS = '1000'
  try {
    const live = selectQuotaShareTarget([{ executionKey: 'live-a', connectionId: 'live-conn' }, { executionKey: 'live-b', connectionId: 'live-other' }], 'live-combo', 'm', T0)
    const leased = live.target.connectionId
    const deficit = _getDrrDeficitForTest('live-combo', 'live-b')
    const symbols = __schedulerSizesForTests().symbols
    // 999 keys on one connection, plus the combo: 1 001 names in 999 targets.
    const big = Array.from({ length: 999 }, (_, i) => ({ executionKey: `big-${i}`, connectionId: 'big-conn' }))
    assert.throws(() => selectQuotaShareTarget(big, 'big-combo', 'm', T0), (err) => {
      assert.equal(err.name, 'RangeError')
      assert.equal(err.code, 'ERR_QUOTA_INVALID_ARG')
      assert.match(err.message, /^targets: name 1001 execution keys, connection ids and a combo, more than QUOTA_SCHEDULER_MAX_IDS \(1000\)/)
      return true
    })
    assert.equal(__schedulerSizesForTests().symbols, symbols, 'no name interned')
    assert.equal(getInflight(leased, T0), 1, 'the lease kept')
    assert.equal(_getDrrDeficitForTest('live-combo', 'live-b'), deficit, 'the deficits kept')
    // The empty execution key is a name too.
    const withEmpty = [{ executionKey: '', connectionId: 'big-conn' }, ...big.slice(1)]
    assert.throws(() => selectQuotaShareTarget(withEmpty, 'big-combo', 'm', T0), /name 1001 execution keys/)
    assert.equal(__schedulerSizesForTests().symbols, symbols, 'no name interned')
    assert.equal(getInflight(leased, T0), 1, 'the lease kept')
    // One name fewer fits, and selects.
    assert.equal(selectQuotaShareTarget(big.slice(1), 'big-combo', 'm', T0).target.connectionId, 'big-conn')
    live.decrementInflight()
  } finally {
    delete process.env.QUOTA_SCHEDULER_MAX_IDS
  }
})

test('a bound lowered while the targets are read (by a getter) still refuses the selection before it interns any name', () => {
  process.env.QUOTA_SCHEDULER_MAX_IDS = '2000'
  try {
    const lease = incrementInflight('lowered-busy', 1e9, T0)
    const symbols = __schedulerSizesForTests().symbols
    const targets = Array.from({ length: 1200 }, (_, i) => ({ executionKey: `lowered-${i}`, weight: 1 }))
    Object.defineProperty(targets[0], 'weight', {
      get() {
        process.env.QUOTA_SCHEDULER_MAX_IDS = '1000'
        return 1
      },
    })
    assert.throws(() => selectQuotaShareTarget(targets, 'lowered-combo', 'm', T0), (err) => {
      assert.equal(err.name, 'RangeError')
      assert.match(err.message, /^targets: name 1201 execution keys, connection ids and a combo, more than QUOTA_SCHEDULER_MAX_IDS \(1000\)/)
      return true
    })
    assert.equal(__schedulerSizesForTests().symbols, symbols, 'no name interned')
    assert.equal(getInflight('lowered-busy', T0), lease, 'the other lease kept')
  } finally {
    delete process.env.QUOTA_SCHEDULER_MAX_IDS
  }
})
