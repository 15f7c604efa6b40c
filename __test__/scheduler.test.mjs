// selectQuotaShareTarget (docs/contract.md §10) through the host's import paths: one case per rule.
// Time is always injected (nowMs); no case depends on the clock or on speed.
import { test, beforeEach } from 'node:test'
import assert from 'node:assert/strict'
import {
  selectQuotaShareTarget,
  _clearDrrStateForTest,
  _getDrrDeficitForTest,
} from '@omniroute/quota-engine/compat/quotaShareStrategy'
import {
  DEFAULT_LEASE_MS,
  getInflight,
  incrementInflight,
  _clearInflightForTest,
  _inflightSizeForTest,
} from '@omniroute/quota-engine/compat/quotaShareInflight'
import { recordUsage, _clearBucketsForTest, _bucketCountForTest } from '@omniroute/quota-engine/compat/accountBuckets'

const T0 = 1_700_000_000_000
const COMBO = 'pool-combo'
const MODEL = 'claude/opus-4'

beforeEach(() => {
  _clearDrrStateForTest()
  _clearInflightForTest()
  _clearBucketsForTest()
})

/** Targets `A`, `B`, … on connections `conn-A`, `conn-B`, …, weight 1, with an extra field. */
function targets(...names) {
  return names.map((name) => ({ executionKey: name, connectionId: `conn-${name}`, weight: 1, modelStr: MODEL, extra: { name } }))
}

const keys = (list) => list.map((t) => t.executionKey).join('')

/** Selects and releases at once (no load), returning the winner's key. */
function pick(list, { combo = COMBO, model = MODEL, now = T0, options } = {}) {
  const result = selectQuotaShareTarget(list, combo, model, now, options)
  result.decrementInflight()
  return result.target.executionKey
}

function saturate(connectionId, windowKey, resetAt = null) {
  recordUsage(connectionId, windowKey, 100, resetAt, T0 - 1000)
}

test('1. empty targets: target null, no order, a no-op release, and no state', () => {
  const result = selectQuotaShareTarget([], COMBO, MODEL, T0)
  assert.equal(result.target, null)
  assert.deepEqual(result.orderedTargets, [])
  assert.equal(typeof result.decrementInflight, 'function')
  assert.equal(result.decrementInflight(), undefined)
  assert.equal(_inflightSizeForTest(), 0)
})

test('the result holds the very same target objects', () => {
  const list = targets('A', 'B', 'C')
  const result = selectQuotaShareTarget(list, COMBO, MODEL, T0)
  assert.equal(result.target, list[0])
  assert.equal(result.orderedTargets.length, 3)
  for (const target of result.orderedTargets) assert.ok(list.includes(target))
  assert.equal(result.orderedTargets[1].extra, list[1].extra)
  assert.notEqual(result.orderedTargets, list, 'a new array, not the input')
  assert.equal(keys(list), 'ABC', 'the input is not reordered')
})

test('2. a saturated 5h bucket gates its target', () => {
  saturate('conn-A', '5h', new Date(T0 + 60_000).toISOString())
  const result = selectQuotaShareTarget(targets('A', 'B', 'C'), COMBO, MODEL, T0)
  assert.equal(keys(result.orderedTargets), 'BCA', 'A goes to the saturated tier')
})

test('2. a saturated 7d bucket gates its target', () => {
  saturate('conn-B', '7d')
  const result = selectQuotaShareTarget(targets('A', 'B', 'C'), COMBO, MODEL, T0)
  assert.equal(keys(result.orderedTargets), 'ACB')
})

test("2. the request model's 7d bucket gates (model = modelStr after its first '/')", () => {
  saturate('conn-A', '7d:opus-4')
  assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, 'claude/opus-4', T0).orderedTargets), 'BA')
})

test('2. an empty model (no name after the slash, or none at all) names no model bucket', () => {
  saturate('conn-A', '7d:')
  for (const model of ['', 'claude/', '/']) {
    _clearInflightForTest()
    _clearDrrStateForTest()
    assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, model, T0).orderedTargets), 'AB', JSON.stringify(model))
  }
})

test("2. another model's saturation does not gate", () => {
  saturate('conn-A', '7d:sonnet-4')
  assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, 'claude/opus-4', T0).orderedTargets), 'AB')
})

test('2. targets without a connection are never saturated', () => {
  saturate('conn-A', '5h')
  const list = [...targets('A'), { executionKey: 'N', weight: 1 }]
  const result = selectQuotaShareTarget(list, COMBO, MODEL, T0)
  assert.equal(keys(result.orderedTargets), 'NA')
  assert.equal(_inflightSizeForTest(), 0, 'no connection, no lease')
})

test('2. when every target is saturated, all are eligible again (fail-open)', () => {
  for (const name of ['A', 'B', 'C']) saturate(`conn-${name}`, '5h')
  const result = selectQuotaShareTarget(targets('A', 'B', 'C'), COMBO, MODEL, T0)
  assert.equal(keys(result.orderedTargets), 'ABC')
  assert.equal(getInflight('conn-A', T0), 1)
})

test('2. gating ends lazily at the reset instant', () => {
  const resetAt = T0 + 5000
  saturate('conn-A', '5h', new Date(resetAt).toISOString())
  assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, MODEL, resetAt - 1).orderedTargets), 'BA')
  assert.equal(_bucketCountForTest(), 1)
  _clearDrrStateForTest()
  _clearInflightForTest()
  assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, MODEL, resetAt).orderedTargets), 'AB')
  assert.equal(_bucketCountForTest(), 0, 'the look at the reset instant removed the bucket')
})

test('3. targets at their concurrency cap move to the at-cap tier', () => {
  incrementInflight('conn-A', DEFAULT_LEASE_MS, T0)
  const caps = new Map([['conn-A', 1], ['conn-B', 1]])
  const list = targets('A', 'B', 'C')
  const first = selectQuotaShareTarget(list, COMBO, MODEL, T0, { maxConcurrentByConnection: caps })
  assert.equal(keys(first.orderedTargets), 'BCA')
  // B holds a slot now and is at its cap too; only C has room.
  const second = selectQuotaShareTarget(list, COMBO, MODEL, T0, { maxConcurrentByConnection: caps })
  assert.equal(keys(second.orderedTargets), 'CAB', 'at-cap tier in input order')
})

test('3. null, <= 0, non-finite and missing caps are no caps', () => {
  for (const cap of [null, 0, -1, NaN, Infinity, undefined, '1']) {
    _clearInflightForTest()
    _clearDrrStateForTest()
    incrementInflight('conn-A', DEFAULT_LEASE_MS, T0)
    const caps = new Map(cap === undefined ? [] : [['conn-A', cap]])
    const result = selectQuotaShareTarget(targets('A', 'B'), COMBO, MODEL, T0, { maxConcurrentByConnection: caps })
    // A stays with room: it wins DRR (input order on the tie) and so pays the deficit.
    assert.equal(_getDrrDeficitForTest(COMBO, 'A'), -0.5, `cap ${String(cap)}`)
    assert.equal(keys(result.orderedTargets), 'BA', 'then P2C prefers B with fewer in flight')
  }
})

test('3. when no eligible target has room, none moves (fail-open)', () => {
  incrementInflight('conn-A', DEFAULT_LEASE_MS, T0)
  incrementInflight('conn-B', DEFAULT_LEASE_MS, T0)
  const caps = new Map([['conn-A', 1], ['conn-B', 1]])
  const result = selectQuotaShareTarget(targets('A', 'B'), COMBO, MODEL, T0, { maxConcurrentByConnection: caps })
  assert.equal(keys(result.orderedTargets), 'AB')
  assert.equal(getInflight('conn-A', T0), 2, 'the winner is leased beyond its cap')
})

test('4. DRR alternates between equal weights', () => {
  const list = targets('A', 'B')
  const winners = Array.from({ length: 6 }, () => pick(list)).join('')
  assert.equal(winners, 'ABABAB')
})

test('4. DRR gives 2:1 to weights 2 and 1, smoothly', () => {
  const list = targets('A', 'B')
  list[0].weight = 2
  const winners = Array.from({ length: 9 }, () => pick(list)).join('')
  assert.equal(winners, 'ABAABAABA')
})

test('4. weights that are not finite and > 0 count as 1', () => {
  for (const weight of [0, -2, NaN, Infinity, undefined, null, '3']) {
    _clearDrrStateForTest()
    const list = targets('A', 'B')
    list[0].weight = weight
    list[1].weight = 1
    assert.equal(Array.from({ length: 4 }, () => pick(list)).join(''), 'ABAB', String(weight))
  }
})

test('4. each round credits w / Σw and the winner pays 1', () => {
  const list = targets('A', 'B', 'C')
  list[2].weight = 2
  pick(list)
  assert.equal(_getDrrDeficitForTest(COMBO, 'A'), 0.25)
  assert.equal(_getDrrDeficitForTest(COMBO, 'B'), 0.25)
  assert.equal(_getDrrDeficitForTest(COMBO, 'C'), -0.5)
  assert.equal(_getDrrDeficitForTest(COMBO, 'unknown'), 0)
  assert.equal(_getDrrDeficitForTest('unknown-combo', 'A'), 0)
})

test('4. with one target with room, the DRR state does not change', () => {
  saturate('conn-B', '5h')
  assert.equal(pick(targets('A', 'B')), 'A')
  assert.equal(_getDrrDeficitForTest(COMBO, 'A'), 0)
  assert.equal(pick(targets('A')), 'A')
  assert.equal(_getDrrDeficitForTest(COMBO, 'A'), 0)
})

test('4. DRR state is isolated per combo name', () => {
  const list = targets('A', 'B')
  assert.equal(pick(list, { combo: 'x' }), 'A')
  assert.equal(pick(list, { combo: 'y' }), 'A', 'a fresh combo starts over')
  assert.equal(pick(list, { combo: 'x' }), 'B')
  assert.equal(_getDrrDeficitForTest('x', 'A'), 0)
  assert.equal(_getDrrDeficitForTest('y', 'A'), -0.5)
})

test('4. at most 200 combos keep state: the oldest inserted is evicted', () => {
  const list = targets('A', 'B')
  for (let i = 0; i < 200; i++) pick(list, { combo: `combo-${i}` })
  pick(list, { combo: 'combo-0' }) // using it again does not make it newer
  assert.equal(_getDrrDeficitForTest('combo-0', 'A'), 0.5 - 1 + 0.5)
  assert.equal(_getDrrDeficitForTest('combo-0', 'B'), 0)
  assert.equal(_getDrrDeficitForTest('combo-1', 'A'), -0.5)
  pick(list, { combo: 'combo-200' })
  assert.equal(_getDrrDeficitForTest('combo-0', 'B'), 0, 'evicted: reads as none')
  assert.equal(_getDrrDeficitForTest('combo-0', 'A'), 0)
  assert.equal(_getDrrDeficitForTest('combo-1', 'A'), -0.5, 'the next oldest is kept')
  assert.equal(_getDrrDeficitForTest('combo-200', 'A'), -0.5)
  // The evicted combo starts over when it comes back (and evicts combo-1).
  assert.equal(pick(list, { combo: 'combo-0' }), 'A')
  assert.equal(_getDrrDeficitForTest('combo-1', 'A'), 0)
})

test('5. P2C: the runner-up is the first of the rest in input order, not the second-largest deficit', () => {
  const list = targets('A', 'B', 'C')
  list[1].weight = 2 // B
  list[2].weight = 3 // C
  incrementInflight('conn-C', DEFAULT_LEASE_MS, T0)
  // Credited 1/6, 2/6, 3/6: C wins the round; B has the next-largest deficit, but the
  // runner-up is A, which has fewer in flight.
  const result = selectQuotaShareTarget(list, COMBO, MODEL, T0)
  assert.equal(keys(result.orderedTargets), 'ACB')
  assert.equal(_getDrrDeficitForTest(COMBO, 'C'), 3 / 6 - 1, 'the DRR winner paid')
})

test('6. a target that repeats the winner\'s execution key is dispatched once', () => {
  const list = [...targets('A', 'B'), { ...targets('A')[0], connectionId: 'conn-A2' }]
  const result = selectQuotaShareTarget(list, COMBO, MODEL, T0)
  assert.equal(result.target, list[0])
  assert.deepEqual(result.orderedTargets, [list[0], list[1]])
})

test('5. P2C: the runner-up wins with strictly fewer in flight', () => {
  incrementInflight('conn-A', DEFAULT_LEASE_MS, T0)
  const result = selectQuotaShareTarget(targets('A', 'B', 'C'), COMBO, MODEL, T0)
  assert.equal(keys(result.orderedTargets), 'BAC', 'B (0 in flight) beats DRR winner A (1)')
  assert.equal(getInflight('conn-B', T0), 1)
  assert.equal(_getDrrDeficitForTest(COMBO, 'A'), 1 / 3 - 1, 'the DRR winner paid')
})

test('5. P2C: on a tie the DRR winner keeps the win', () => {
  incrementInflight('conn-A', DEFAULT_LEASE_MS, T0)
  incrementInflight('conn-B', DEFAULT_LEASE_MS, T0)
  const result = selectQuotaShareTarget(targets('A', 'B', 'C'), COMBO, MODEL, T0)
  assert.equal(keys(result.orderedTargets), 'ABC')
  assert.equal(getInflight('conn-A', T0), 2)
})

test('6. orderedTargets: winner, the rest with room in input order, at-cap tier, saturated tier', () => {
  const list = targets('S', 'A', 'K', 'B', 'C')
  list[3].weight = 2 // B
  list[4].weight = 3 // C
  saturate('conn-S', '5h')
  incrementInflight('conn-K', DEFAULT_LEASE_MS, T0)
  const caps = new Map([['conn-K', 1]])
  const result = selectQuotaShareTarget(list, COMBO, MODEL, T0, { maxConcurrentByConnection: caps })
  // With room: A, B, C credited 1/6, 2/6, 3/6 → C wins, then A and B in input order.
  assert.equal(keys(result.orderedTargets), 'CABKS')
})

test('6. the winner gets a lease of DEFAULT_LEASE_MS that expires without a release', () => {
  const result = selectQuotaShareTarget(targets('A', 'B'), COMBO, MODEL, T0)
  assert.equal(result.target.executionKey, 'A')
  assert.equal(getInflight('conn-A', T0), 1)
  assert.equal(getInflight('conn-A', T0 + DEFAULT_LEASE_MS - 1), 1)
  assert.equal(getInflight('conn-A', T0 + DEFAULT_LEASE_MS), 0, 'expired, never released')
  // An expired lease counts as 0 for P2C: A is no longer "busy".
  _clearDrrStateForTest()
  assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, MODEL, T0 + DEFAULT_LEASE_MS).orderedTargets), 'AB')
})

test('6. decrementInflight releases once (idempotent)', () => {
  incrementInflight('conn-A', DEFAULT_LEASE_MS, T0) // someone else's request
  _clearDrrStateForTest()
  const result = selectQuotaShareTarget(targets('A'), COMBO, MODEL, T0)
  assert.equal(getInflight('conn-A', T0), 2)
  result.decrementInflight()
  result.decrementInflight()
  result.decrementInflight()
  assert.equal(getInflight('conn-A', T0), 1, "the other request's slot is kept")
})

test('6. decrementInflight releases at the selection-time clock', () => {
  const first = selectQuotaShareTarget(targets('A'), COMBO, MODEL, T0)
  // A later request refreshes the slot's expiry to T0 + 100 s + lease.
  incrementInflight('conn-A', DEFAULT_LEASE_MS, T0 + 100_000)
  // Released at T0 the slot is live, so this only counts down; released at the wall
  // clock (far past every expiry) it would have dropped the whole slot.
  first.decrementInflight()
  assert.equal(getInflight('conn-A', T0 + 100_000), 1)
})

test('nowMs defaults to Date.now()', () => {
  const before = Date.now()
  const result = selectQuotaShareTarget(targets('A', 'B'), COMBO, MODEL)
  const after = Date.now()
  assert.equal(getInflight('conn-A'), 1)
  // The lease runs out DEFAULT_LEASE_MS after a time between `before` and `after`.
  assert.equal(getInflight('conn-A', before + DEFAULT_LEASE_MS - 1), 1)
  assert.equal(getInflight('conn-A', after + DEFAULT_LEASE_MS), 0)
  result.decrementInflight()
  assert.equal(getInflight('conn-A'), 0)
})

test('a missing modelStr gates on 5h and 7d only', () => {
  saturate('conn-A', '7d:opus-4')
  assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, undefined, T0).orderedTargets), 'AB')
  _clearInflightForTest()
  saturate('conn-A', '5h')
  assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, null, T0).orderedTargets), 'BA')
})

test('bad input throws TypeError/RangeError with ERR_QUOTA_INVALID_ARG naming the field', () => {
  const ok = targets('A')
  const cases = [
    [() => selectQuotaShareTarget('A', COMBO, MODEL, T0), TypeError, 'targets'],
    [() => selectQuotaShareTarget(undefined, COMBO, MODEL, T0), TypeError, 'targets'],
    [() => { const { proxy, revoke } = Proxy.revocable([], {}); revoke(); return selectQuotaShareTarget(proxy, COMBO, MODEL, T0) }, TypeError, 'targets'],
    [() => selectQuotaShareTarget([null], COMBO, MODEL, T0), TypeError, 'targets[0]'],
    [() => selectQuotaShareTarget([...ok, { connectionId: 'c' }], COMBO, MODEL, T0), TypeError, 'targets[1].executionKey'],
    [() => selectQuotaShareTarget([{ executionKey: 'X', connectionId: 7 }], COMBO, MODEL, T0), TypeError, 'targets[0].connectionId'],
    [() => selectQuotaShareTarget(ok, 42, MODEL, T0), TypeError, 'comboName'],
    [() => selectQuotaShareTarget(ok, COMBO, 42, T0), TypeError, 'modelStr'],
    [() => selectQuotaShareTarget(ok, COMBO, MODEL, '1'), TypeError, 'nowMs'],
    [() => selectQuotaShareTarget(ok, COMBO, MODEL, NaN), RangeError, 'nowMs'],
    [() => selectQuotaShareTarget(ok, COMBO, MODEL, T0, 'x'), TypeError, 'options'],
    [() => selectQuotaShareTarget(ok, COMBO, MODEL, T0, { maxConcurrentByConnection: { A: 1 } }), TypeError, 'options.maxConcurrentByConnection'],
    // A Proxy of a Map that does not pass Map's methods through to it, or a revoked one.
    [() => selectQuotaShareTarget(ok, COMBO, MODEL, T0, { maxConcurrentByConnection: new Proxy(new Map([['A', 1]]), {}) }), TypeError, 'options.maxConcurrentByConnection'],
    [() => { const { proxy, revoke } = Proxy.revocable(new Map(), {}); revoke(); return selectQuotaShareTarget(ok, COMBO, MODEL, T0, { maxConcurrentByConnection: proxy }) }, TypeError, 'options.maxConcurrentByConnection'],
  ]
  for (const [call, ErrorClass, field] of cases) {
    assert.throws(call, (err) => {
      assert.ok(err instanceof ErrorClass, `${field}: ${err}`)
      assert.equal(err.code, 'ERR_QUOTA_INVALID_ARG')
      assert.ok(err.message.startsWith(`${field}: `), err.message)
      return true
    })
  }
  assert.equal(_inflightSizeForTest(), 0, 'a rejected call leases nothing')
})

test('a target or options that throw when read end the call with their own exception, leasing nothing', () => {
  const own = new Error('the getter threw')
  const revokedObject = () => {
    const { proxy, revoke } = Proxy.revocable({}, {})
    revoke()
    return proxy
  }
  const cases = [
    [() => [...targets('A'), { executionKey: 'B', get connectionId() { throw own } }], undefined, own],
    [() => [...targets('A'), revokedObject()], undefined, TypeError],
    [() => targets('A', 'B'), { get maxConcurrentByConnection() { throw own } }, own],
    [() => targets('A', 'B'), revokedObject(), TypeError],
  ]
  for (const [list, options, thrown] of cases) {
    assert.throws(
      () => selectQuotaShareTarget(list(), COMBO, MODEL, T0, options),
      (err) => (thrown instanceof Error ? err === thrown : err instanceof thrown && /revoked/.test(err.message)),
    )
    assert.equal(_inflightSizeForTest(), 0, 'a call that threw leases nothing')
    assert.equal(_getDrrDeficitForTest(COMBO, 'A'), 0, 'nor moves a deficit')
  }
  assert.equal(pick(targets('A', 'B')), 'A', 'and the next selection is as the first')
})

test('a selection is synchronous', () => {
  const result = selectQuotaShareTarget(targets('A'), COMBO, MODEL, T0)
  assert.ok(!(result instanceof Promise))
})

test('a targets array reused and changed in place is read afresh on every call', () => {
  const list = targets('A', 'B')
  pick(list)
  pick(list) // the array is now cached on the JavaScript side
  // A new connection: its saturation must gate the target.
  saturate('conn-Z', '5h')
  list[0].connectionId = 'conn-Z'
  assert.equal(keys(selectQuotaShareTarget(list, COMBO, MODEL, T0).orderedTargets), 'BA')
  _clearInflightForTest()
  // A new object in the same slot, and a new weight.
  list[0] = { executionKey: 'A', connectionId: 'conn-A', weight: 1 }
  list[1].weight = 3
  _clearDrrStateForTest()
  assert.equal(Array.from({ length: 4 }, () => pick(list)).join(''), 'BABB')
  // A longer array.
  list.push({ executionKey: 'C', connectionId: 'conn-C', weight: 100 })
  assert.equal(pick(list), 'C')
})

test('model names of any length and script gate their own 7d bucket', () => {
  for (const model of ['x'.repeat(254), 'y'.repeat(255), 'z'.repeat(300), 'модель-ü-模型', `${'é'.repeat(127)}a`, `${'é'.repeat(128)}`]) {
    _clearBucketsForTest()
    _clearInflightForTest()
    _clearDrrStateForTest()
    saturate('conn-A', `7d:${model}`)
    assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, `p/${model}`, T0).orderedTargets), 'BA', `${model.length} chars`)
    _clearInflightForTest()
    _clearDrrStateForTest()
    assert.equal(keys(selectQuotaShareTarget(targets('A', 'B'), COMBO, `p/${model}!`, T0).orderedTargets), 'AB')
  }
})

test('the internal crossing rejects malformed calls with an error instead of crashing', async () => {
  const { createRequire } = await import('node:module')
  const binding = createRequire(import.meta.url)('../binding.js')
  const { __quotaShareSelect: select, __quotaShareRelease: release } = binding
  const buffer = new Float64Array(10)
  for (const call of [
    () => select(),
    () => select(0, null, T0, 2, new Float32Array(10)),
    () => select(0, null, T0, 2, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    () => select(0, null, T0, 3, buffer),
    () => select(0, 42, T0, 2, buffer),
    () => select(0, null, NaN, 2, buffer),
    () => release('x', T0),
    () => release(1),
  ]) {
    assert.throws(call, (err) => err instanceof Error && typeof err.code === 'string')
  }
  assert.deepEqual([...buffer], new Array(10).fill(0), 'nothing written')
})

test('a selection made from inside another over the same array (a weight getter, a Proxy): each reads into a buffer of its own', () => {
  for (const via of ['getter', 'proxy']) {
    _clearDrrStateForTest()
    _clearInflightForTest()
    const inners = []
    let depth = 0
    const nested = () => {
      if (depth++ === 0) inners.push(selectQuotaShareTarget(list, 'inner-combo', MODEL, T0))
      depth--
    }
    let list = targets('A', 'B', 'C')
    if (via === 'getter') {
      Object.defineProperty(list[1], 'weight', {
        get: () => {
          nested()
          return 1
        },
      })
    } else {
      // Every index read, including the outer's reads after its native call.
      list = new Proxy(list, {
        get: (array, key, receiver) => {
          if (key === '2') nested()
          return Reflect.get(array, key, receiver)
        },
      })
    }
    // Several rounds over the same array.
    for (let round = 0; round < 5; round++) {
      inners.length = 0
      const result = selectQuotaShareTarget(list, COMBO, MODEL, T0)
      assert.ok(inners.length > 0, `${via}: the nested selection ran`)
      for (const r of [result, ...inners]) {
        const sorted = [...r.orderedTargets].sort((a, b) => a.executionKey.localeCompare(b.executionKey))
        assert.equal(keys(sorted), 'ABC', `${via}, round ${round}: every target once`)
        assert.equal(r.target, r.orderedTargets[0])
      }
      assert.ok(getInflight(result.target.connectionId, T0) >= 1, "the outer winner's lease")
      result.decrementInflight()
      for (const r of inners) r.decrementInflight()
      assert.equal(getInflight('conn-A', T0) + getInflight('conn-B', T0) + getInflight('conn-C', T0), 0, 'released')
    }
  }
})

test('a selection made from inside another (a weight getter, a Proxy): each keeps its own targets, leases and DRR state', () => {
  for (let round = 0; round < 6; round++) {
    _clearDrrStateForTest()
    _clearInflightForTest()
    const inner = targets('X', 'Y')
    const inners = []
    const selectInner = () => inners.push(selectQuotaShareTarget(inner, 'inner-combo', MODEL, T0))
    const plain = targets('A', 'B', 'C')
    Object.defineProperty(plain[round % 3], 'weight', {
      get: () => {
        selectInner()
        return 1
      },
    })
    const proxied = new Proxy(targets('D', 'E', 'F'), {
      get: (list, key, receiver) => {
        if (key === String(round % 3)) selectInner()
        return Reflect.get(list, key, receiver)
      },
    })
    // Three times each over the same array.
    for (const outer of [plain, plain, plain, proxied, proxied, proxied]) {
      const before = inners.length
      const result = selectQuotaShareTarget(outer, COMBO, MODEL, T0)
      assert.ok(inners.length > before, 'the nested selection ran')
      const own = [...outer]
      assert.ok(own.includes(result.target), `round ${round}: the winner is one of the outer targets`)
      assert.deepEqual(new Set(result.orderedTargets), new Set(own))
      const nested = inners.at(-1)
      assert.ok(inner.includes(nested.target))
      assert.equal(_getDrrDeficitForTest(COMBO, 'X') + _getDrrDeficitForTest(COMBO, 'Y'), 0, "the outer combo holds none of the inner one's keys")
      const innerLeases = getInflight('conn-X', T0) + getInflight('conn-Y', T0)
      assert.equal(getInflight(result.target.connectionId, T0), 1, "the outer winner's lease")
      result.decrementInflight()
      assert.equal(getInflight(result.target.connectionId, T0), 0, 'released')
      assert.equal(getInflight('conn-X', T0) + getInflight('conn-Y', T0), innerLeases, "the inner leases untouched by the outer's release")
      for (const n of inners.splice(0)) n.decrementInflight()
    }
  }
})

test("each selection reads each target's fields once, also over an array selected from before", () => {
  const reads = { executionKey: 0, connectionId: 0, weight: 0 }
  const counted = (name) => {
    const target = {}
    for (const [field, value] of [['executionKey', name], ['connectionId', `conn-${name}`], ['weight', 1]]) {
      Object.defineProperty(target, field, {
        get() {
          reads[field]++
          return value
        },
        enumerable: true,
      })
    }
    return target
  }
  const list = [counted('A'), counted('B')]
  // With caps too: the cap is looked up by the connection id as read, not read again.
  const options = { maxConcurrentByConnection: new Map([['conn-A', 5]]) }
  for (let call = 1; call <= 4; call++) {
    selectQuotaShareTarget(list, COMBO, MODEL, T0 + call, call % 2 ? options : undefined).decrementInflight()
    for (const field of Object.keys(reads)) {
      assert.equal(reads[field], 2 * call, `call ${call}: ${field} read once per target`)
    }
  }
})

test("an array whose values change between selections has each field read once each time", () => {
  const reads = { executionKey: 0, connectionId: 0, weight: 0 }
  let round = 0
  const counted = (name) => ({
    get executionKey() {
      reads.executionKey++
      return `${name}-${round % 2}`
    },
    get connectionId() {
      reads.connectionId++
      return `conn-${name}-${round % 3}`
    },
    get weight() {
      reads.weight++
      return round
    },
  })
  const list = [counted('A'), counted('B')]
  for (round = 1; round <= 6; round++) {
    selectQuotaShareTarget(list, COMBO, MODEL, T0 + round).decrementInflight()
    assert.deepEqual(reads, { executionKey: 2 * round, connectionId: 2 * round, weight: 2 * round }, `round ${round}`)
  }
})

test("a selection keeps none of its targets once it has returned", async () => {
  const v8 = await import('node:v8')
  const vm = await import('node:vm')
  v8.setFlagsFromString('--expose-gc')
  const gc = vm.runInNewContext('gc')
  const refs = (() => {
    const big = Array.from({ length: 200 }, (_, i) => ({ executionKey: `big-${i}`, connectionId: `big-conn-${i % 4}`, weight: 1 }))
    selectQuotaShareTarget(big, 'big-combo', MODEL, T0).decrementInflight()
    return big.map((target) => new WeakRef(target))
  })()
  for (let i = 0; i < 3; i++) {
    selectQuotaShareTarget([{ executionKey: 'a', connectionId: 'x' }, { executionKey: 'b', connectionId: 'y' }], 'small', MODEL, T0 + i + 1).decrementInflight()
  }
  for (let i = 0; i < 3; i++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
  }
  assert.equal(refs.filter((ref) => ref.deref() !== undefined).length, 0)
})

test('each element of the targets array is read once per selection, so the answer holds the objects checked and a lease is never left behind', () => {
  const list = targets('A', 'B', 'C')
  let reads = 0
  let seenThisCall = new Set()
  const proxy = new Proxy(list, {
    get(target, key, receiver) {
      if (typeof key === 'string' && /^\d+$/.test(key)) {
        reads++
        // A second read of an index in one selection throws, as a hostile Proxy might.
        if (seenThisCall.has(key)) throw new Error(`targets[${key}] read twice`)
        seenThisCall.add(key)
      }
      return Reflect.get(target, key, receiver)
    },
  })
  for (let call = 1; call <= 4; call++) {
    seenThisCall = new Set()
    const result = selectQuotaShareTarget(proxy, COMBO, MODEL, T0 + call)
    assert.equal(reads, 3 * call, `call ${call}: each element read once`)
    assert.ok(list.includes(result.target))
    result.decrementInflight()
  }
  for (const t of list) assert.equal(getInflight(t.connectionId, T0 + 5), 0, `${t.connectionId}: no lease left`)
})

test("a getter cannot write into a selection's buffer through Node's Buffer pool: the cap still holds", () => {
  _clearDrrStateForTest()
  _clearInflightForTest()
  incrementInflight('conn-capped', 1e9, T0) // at its cap of 1
  for (let i = 0; i < 2; i++) incrementInflight('conn-free', 1e9, T0)
  const clobber = {
    executionKey: 'free',
    connectionId: 'conn-free',
    get weight() {
      new Float64Array(Buffer.from('x').buffer).fill(Number.NaN) // the whole pool slab
      return 1
    },
  }
  const options = { maxConcurrentByConnection: new Map([['conn-capped', 1]]) }
  const result = selectQuotaShareTarget([{ executionKey: 'capped', connectionId: 'conn-capped' }, clobber], COMBO, MODEL, T0, options)
  assert.equal(result.target, clobber)
  assert.equal(getInflight('conn-capped', T0), 1)
  result.decrementInflight()
  _clearInflightForTest()
})

test('caps in a Proxy that passes Map\'s methods through to its Map (a reactive wrapper) are used as the Map', () => {
  const map = new Map([['conn-A', 1]])
  const reactive = new Proxy(map, {
    get: (target, key) => {
      const value = Reflect.get(target, key, target)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  const held = selectQuotaShareTarget(targets('A', 'B'), COMBO, MODEL, T0, { maxConcurrentByConnection: reactive })
  assert.equal(held.target.executionKey, 'A')
  // A is at its cap of 1 while the first lease is held.
  assert.equal(pick(targets('A', 'B'), { options: { maxConcurrentByConnection: reactive } }), 'B')
  held.decrementInflight()
  _clearInflightForTest()
})

test('a targets array whose length is not a whole number, or that names more targets than the scheduler can, is a RangeError on targets', () => {
  const lying = (length) => new Proxy(targets('A', 'B'), { get: (t, k) => (k === 'length' ? length : t[k]) })
  for (const length of [1e9, Number.NaN, -1, '2', 2.5]) {
    assert.throws(
      () => selectQuotaShareTarget(lying(length), COMBO, MODEL, T0),
      (err) => err instanceof RangeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith('targets: '),
      `length ${String(length)}`,
    )
  }
  assert.equal(_inflightSizeForTest(), 0, 'no lease taken')
  assert.equal(pick(targets('A', 'B')), 'A', 'selections still work')
})
