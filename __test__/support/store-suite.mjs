// The QuotaStore suite (docs/contract.md §2, §4), one suite for every driver: SQLite
// (store-suite.test.mjs), Redis (redis-store.test.mjs) and Redis Cluster
// (redis-cluster.test.mjs) each call `storeSuite` with a factory.
//
// `driver()` returns `{ store, at, countWrites? }`:
// - `store`: the QuotaStore under test (the object the host gets from the factory);
// - `at`: the same operations at an injected time — `consume(apiKeyId, dim, cost, nowMs)`,
//   `peek(apiKeyId, dim, nowMs)`, `poolConsumedTotal(dim, nowMs)`, each returning a value or
//   a promise — so bucket rotation is tested without sleeping;
// - `countWrites()`: how many counter rows/keys exist (to check that a rejected call wrote
//   nothing).
// Pools (metadata) are created through the engine's SQLite metadata API, which both
// drivers read.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

/** Registers the suite's tests under `name`; `options.skip` skips them all (with why). */
export function storeSuite(name, driver, options = {}) {
  const qe = require('@omniroute/quota-engine')
  const { WINDOW_MS } = qe
  const t = (title, fn) => test(`${name}: ${title}`, { skip: options.skip }, fn)
  // Every run gets its own pool ids, so drivers sharing a server never see each other.
  const run = `${name}-${process.pid}-${Date.now().toString(36)}`
  const dim = (pool, unit = 'requests', window = 'hourly') => ({ poolId: `${run}-${pool}`, unit, window })

  t('consume sums across calls and resolves to the new effective value', async () => {
    const { store } = driver()
    const d = dim('sum')
    assert.equal(await store.consume('k1', d, 1.5), 1.5)
    assert.equal(await store.consume('k1', d, 2), 3.5)
    assert.equal(await store.consume('k1', d, 0.25), 3.75)
    assert.equal(await store.peek('k1', d), 3.75)
    assert.equal(await store.peek('k2', d), 0)
  })

  t('bucket rotation and decay with injected time', async () => {
    const { at } = driver()
    const d = dim('decay', 'tokens', 'hourly')
    const W = WINDOW_MS.hourly
    const start = 500_000 * W
    assert.equal(await at.consume('dk', d, 100, start + 10), 100)
    assert.equal(await at.consume('dk', d, 20, start + W - 1), 120)
    // The next bucket: prev weighs 1 at its start, 0.5 halfway, ~0 at its end.
    assert.equal(await at.peek('dk', d, start + W), 120)
    assert.equal(await at.peek('dk', d, start + W + W / 2), 60)
    assert.ok(Math.abs((await at.peek('dk', d, start + 2 * W - 1)) - 120 / W) < 1e-9)
    assert.equal(await at.consume('dk', d, 10, start + W + W / 2), 70)
    // Two buckets later the first no longer counts.
    assert.equal(await at.peek('dk', d, start + 2 * W), 10)
    assert.equal(await at.peek('dk', d, start + 3 * W), 0)
    // The pool total applies the same formula to the summed buckets.
    await at.consume('dk2', d, 30, start + 10)
    assert.equal(await at.poolConsumedTotal(d, start + W + W / 2), (120 + 30) / 2 + 10)
  })

  t('clear zeroes the key only', async () => {
    const { store } = driver()
    const d = dim('clear')
    await store.consume('a', d, 5)
    await store.consume('b', d, 7)
    await store.clear('a', d)
    assert.equal(await store.peek('a', d), 0)
    assert.equal(await store.peek('b', d), 7)
    assert.equal(await store.poolConsumedTotal(d.poolId, d), 7)
    assert.equal(await store.consume('a', d, 1), 1)
  })

  t('a huge cost saturates at 1e15: the counter and the pool total stay finite, clear works', async () => {
    // consume(…, 1e308) twice made the counter and the pool total Infinity, and clear
    // then failed (SQLite: NOT NULL on the totals; Redis: INCRBYFLOAT refuses Infinity).
    const { store } = driver()
    const d = dim('huge', 'tokens', 'hourly')
    assert.equal(await store.consume('h1', d, 1e308), 1e15)
    assert.equal(await store.consume('h1', d, 1e308), 1e15)
    assert.equal(await store.consume('h1', d, Number.MAX_VALUE), 1e15)
    assert.equal(await store.consume('h2', d, 5), 5)
    assert.equal(await store.poolConsumedTotal(d.poolId, d), 1e15 + 5)
    await store.clear('h1', d)
    assert.equal(await store.peek('h1', d), 0)
    assert.equal(await store.poolConsumedTotal(d.poolId, d), 5)
    for (const bad of [Infinity, -Infinity, NaN, -1]) {
      await assert.rejects(async () => store.consume('h1', d, bad), (err) => err instanceof RangeError && /cost/.test(err.message))
    }
  })

  t('poolConsumedTotal sums every key of the dimension, and only it', async () => {
    const { store } = driver()
    const d = dim('total', 'usd', 'daily')
    for (const [k, c] of [['x', 1], ['y', 2.5], ['z', 4], ['x', 0.5]]) await store.consume(k, d, c)
    await store.consume('x', { ...d, window: 'weekly' }, 100)
    await store.consume('x', dim('other', 'usd', 'daily'), 100)
    assert.equal(await store.poolConsumedTotal(d.poolId, d), 8)
  })

  t('poolConsumedTotal counts allocated keys and keys without an allocation alike', async () => {
    const { store } = driver()
    const pool = qe.createPool({ connectionId: `${run}-conn-mixed`, name: `${run}-mixed`, allocations: [
      { apiKeyId: 'm1', weight: 50, policy: 'hard' },
      { apiKeyId: 'm2', weight: 50, policy: 'hard' },
    ] })
    const d = { poolId: pool.id, unit: 'tokens', window: 'daily' }
    await store.consume('m1', d, 10)
    await store.consume('outsider', d, 5)
    assert.equal(await store.poolConsumedTotal(pool.id, d), 15)
  })

  t('poolUsageWithDimensions: snapshot shape, fair share, deficit, borrowing, burnRate', async () => {
    const { store } = driver()
    const pool = qe.createPool({ connectionId: `${run}-conn-snap`, name: `${run}-snap`, allocations: [
      { apiKeyId: 'ka', weight: 60, policy: 'hard' },
      { apiKeyId: 'kb', weight: 40, policy: 'soft' },
    ] })
    await store.consume('ka', { poolId: pool.id, unit: 'tokens', window: 'daily' }, 700)
    await store.consume('kb', { poolId: pool.id, unit: 'tokens', window: 'daily' }, 100)
    const snap = await store.poolUsageWithDimensions(pool.id, [
      { unit: 'tokens', window: 'daily', limit: 1000 },
      { unit: 'requests', window: 'fortnightly', limit: 5 },
      { unit: 'requests', window: 'hourly', limit: 10 },
    ])
    assert.equal(snap.poolId, pool.id)
    assert.equal(new Date(snap.generatedAt).toISOString(), snap.generatedAt)
    assert.ok(Math.abs(Date.parse(snap.generatedAt) - Date.now()) < 60_000)
    assert.equal(snap.dimensions.length, 2, 'the unknown window is skipped')
    const [tok, req] = snap.dimensions
    assert.deepEqual([tok.unit, tok.window, tok.limit, tok.consumedTotal], ['tokens', 'daily', 1000, 800])
    const byKey = Object.fromEntries(tok.perKey.map((p) => [p.apiKeyId, p]))
    assert.deepEqual(byKey.ka, { apiKeyId: 'ka', consumed: 700, fairShare: 600, deficit: 100, borrowing: true })
    assert.deepEqual(byKey.kb, { apiKeyId: 'kb', consumed: 100, fairShare: 400, deficit: -300, borrowing: false })
    assert.deepEqual([req.unit, req.window, req.limit, req.consumedTotal], ['requests', 'hourly', 10, 0])
    for (const p of req.perKey) assert.equal(p.fairShare, p.apiKeyId === 'ka' ? 6 : 4)
    assert.ok(snap.burnRate, 'burnRate present for a tokens dimension with consumption')
    assert.ok(snap.burnRate.tokensPerSecond > 0)
    assert.ok(snap.burnRate.timeToExhaustionMs === null || snap.burnRate.timeToExhaustionMs >= 0)
  })

  t('zero-weight pool: fairShare 0 for all keys; unknown pool: dimensions []', async () => {
    const { store } = driver()
    const p = qe.createPool({ connectionId: `${run}-conn-zero`, name: `${run}-zero`, allocations: [
      { apiKeyId: 'z1', weight: 0, policy: 'hard' }, { apiKeyId: 'z2', weight: 0, policy: 'burst' },
    ] })
    await store.consume('z1', { poolId: p.id, unit: 'usd', window: 'daily' }, 3)
    const snap = await store.poolUsageWithDimensions(p.id, [{ unit: 'usd', window: 'daily', limit: 50 }])
    assert.equal(snap.dimensions[0].perKey.length, 2)
    for (const k of snap.dimensions[0].perKey) assert.equal(k.fairShare, 0)
    const z1 = snap.dimensions[0].perKey.find((k) => k.apiKeyId === 'z1')
    assert.deepEqual([z1.consumed, z1.deficit, z1.borrowing], [3, 3, true])
    assert.equal(snap.burnRate, undefined)
    const none = await store.poolUsage(`${run}-no-such-pool`)
    assert.equal(none.poolId, `${run}-no-such-pool`)
    assert.deepEqual(none.dimensions, [])
    const none2 = await store.poolUsageWithDimensions(`${run}-no-such-pool`, [{ unit: 'usd', window: 'daily', limit: 1 }])
    assert.deepEqual(none2.dimensions, [])
  })

  t('bad cost, empty apiKeyId or a bad dim field rejects (never throws), naming the field, and writes nothing', async () => {
    const { store, countWrites } = driver()
    const d = dim('bad')
    const before = countWrites ? await countWrites() : null
    for (const cost of [NaN, -1, 'x', Infinity]) {
      const pending = store.consume('bk', d, cost)
      assert.ok(pending instanceof Promise, 'async stays async')
      await assert.rejects(pending, (e) => (e instanceof TypeError || e instanceof RangeError) && e.code === 'ERR_QUOTA_INVALID_ARG' && /cost/.test(e.message), `cost ${String(cost)}`)
    }
    await assert.rejects(store.consume('', d, 1), (e) => e instanceof RangeError && e.code === 'ERR_QUOTA_INVALID_ARG' && /apiKeyId/.test(e.message))
    await assert.rejects(store.consume('bk', { ...d, unit: 'bytes' }, 1), (e) => e instanceof RangeError && e.code === 'ERR_QUOTA_INVALID_ARG' && /^dim\.unit/.test(e.message))
    await assert.rejects(store.consume('bk', { ...d, window: 'fortnightly' }, 1), (e) => e instanceof RangeError && e.code === 'ERR_QUOTA_INVALID_ARG' && /^dim\.window/.test(e.message))
    await assert.rejects(store.consume('bk', { ...d, poolId: 7 }, 1), (e) => e instanceof TypeError && e.code === 'ERR_QUOTA_INVALID_ARG' && /^dim\.poolId/.test(e.message))
    await assert.rejects(store.peek('bk', { poolId: d.poolId, unit: 'requests' }), (e) => e instanceof TypeError && e.code === 'ERR_QUOTA_INVALID_ARG' && /^dim\.window: expected a string, got undefined/.test(e.message))
    await assert.rejects(store.poolConsumedTotal('bad', { ...d, unit: 'bytes' }), (e) => e instanceof RangeError && /^dim\.unit/.test(e.message))
    await assert.rejects(store.clear('bk', { ...d, window: 'fortnightly' }), (e) => e instanceof RangeError && /^dim\.window/.test(e.message))
    if (countWrites) assert.equal(await countWrites(), before)
    assert.equal(await store.peek('bk', d), 0)
  })

  t('a dim that is not an object rejects (never throws) with "dim: expected an object, got …", as before it crossed as fields', async () => {
    const { store, countWrites } = driver()
    const before = countWrites ? await countWrites() : null
    const calls = {
      consume: (bad) => store.consume('nk', bad, 1),
      peek: (bad) => store.peek('nk', bad),
      poolConsumedTotal: (bad) => store.poolConsumedTotal('nk-pool', bad),
      clear: (bad) => store.clear('nk', bad),
    }
    for (const [name, call] of Object.entries(calls)) {
      for (const [bad, kind] of [[null, 'null'], [undefined, 'undefined'], ['nk-pool:requests:hourly', 'string'], [7, 'number'], [() => {}, 'function']]) {
        const pending = call(bad)
        assert.ok(pending instanceof Promise, `${name}(${kind}) stays async`)
        await assert.rejects(
          pending,
          (e) => e instanceof TypeError && e.code === 'ERR_QUOTA_INVALID_ARG' && e.message === `dim: expected an object, got ${kind}`,
          `${name}(${kind})`,
        )
      }
    }
    // The argument before dim is still read first; the reads come before the engine's checks of the values.
    await assert.rejects(store.consume(7, null, 1), (e) => e instanceof TypeError && e.code === 'ERR_QUOTA_INVALID_ARG' && e.message === 'apiKeyId: expected a string, got number')
    await assert.rejects(store.consume('', null, 1), (e) => e instanceof TypeError && e.message === 'dim: expected an object, got null')
    await assert.rejects(store.consume('nk', null, NaN), (e) => e instanceof TypeError && e.message === 'dim: expected an object, got null')
    // An array is an object, as it was: its fields are what is missing.
    await assert.rejects(store.peek('nk', []), (e) => e instanceof TypeError && /^dim\.poolId: expected a string, got undefined/.test(e.message))
    if (countWrites) assert.equal(await countWrites(), before, 'nothing written')
    // A getter that throws: its own error, as a rejection; a Proxy is read through its traps.
    const boom = new Error('getter says no')
    await assert.rejects(store.consume('nk', { get poolId() { throw boom }, unit: 'requests', window: 'hourly' }, 1), (e) => e === boom)
    const seen = []
    const proxied = new Proxy(dim('nk-proxy'), {
      get: (target, key) => {
        seen.push(key)
        return target[key]
      },
    })
    assert.equal(await store.consume('nk', proxied, 2), 2)
    assert.deepEqual(seen.filter((k) => typeof k === 'string'), ['poolId', 'unit', 'window'])
    await store.clear('nk', proxied)
  })

  t('1000 concurrent consume promises on one key give the exact sum', async () => {
    const { store } = driver()
    const d = dim('conc', 'requests', 'daily')
    const results = await Promise.all(Array.from({ length: 1000 }, () => store.consume('one', d, 1)))
    assert.equal(await store.peek('one', d), 1000)
    // Every resolved value is distinct: each consume saw its own increment.
    assert.equal(new Set(results).size, 1000)
    assert.equal(Math.max(...results), 1000)
  })
}
