// SqliteQuotaStore (docs/contract.md §2, §4) and the shared metadata tables (§5) against a real
// storage.sqlite that the "host" also holds through better-sqlite3. What every driver must
// do is in the shared suite (support/store-suite.mjs, run by store-suite.test.mjs); this
// file keeps what is SQLite's own: rows, the host's connection, the counter functions.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import { makeDataDir, openHost, loadEngine } from './support/store-env.mjs'

const dataDir = makeDataDir('store')
const dbFile = path.join(dataDir, 'storage.sqlite')
const require = createRequire(import.meta.url)
const native = require('../binding.js')
const { StoreDriver } = require('../lib/stores.js')
const sqliteDriver = new StoreDriver()
const qe = loadEngine()
const { getSqliteQuotaStore, closeQuotaDb, WINDOW_MS } = qe

let host
const store = getSqliteQuotaStore()
const dim = (poolId, unit = 'requests', window = 'hourly') => ({ poolId, unit, window })
const key = (d) => `${d.poolId}:${d.unit}:${d.window}`
const count = (table) => host.prepare(`SELECT count(*) AS n FROM ${table}`).get().n
const isInvalidAny = (field) => (err) => {
  assert.ok(err instanceof TypeError || err instanceof RangeError, `got ${err && err.constructor.name}: ${err && err.message}`)
  assert.equal(err.code, 'ERR_QUOTA_INVALID_ARG')
  assert.ok(err.message.includes(field), `message ${JSON.stringify(err.message)} should name ${field}`)
  return true
}

before(async () => {
  await store.peek('boot', dim('boot')) // the engine creates the file and runs migrations
  assert.ok(fs.existsSync(dbFile))
  host = openHost(dbFile)
})
after(() => {
  host?.close()
  closeQuotaDb()
})

test('consume sums across calls and resolves to the new effective value', async () => {
  const d = dim('sum-pool')
  assert.equal(await store.consume('k1', d, 1.5), 1.5)
  assert.equal(await store.consume('k1', d, 2), 3.5)
  assert.equal(await store.consume('k1', d, 0.25), 3.75)
  assert.equal(await store.peek('k1', d), 3.75)
  assert.equal(await store.peek('k2', d), 0)
  const bucket = Math.floor(Date.now() / WINDOW_MS.hourly)
  assert.equal(qe.flushQuotaWrites(), null) // consume is buffered like a record: the host's connection sees it once committed
  const row = host.prepare('SELECT sum(consumed) AS s FROM quota_consumption WHERE api_key_id=? AND dimension_key=?').get('k1', key(d))
  assert.equal(row.s, 3.75)
  assert.ok([bucket, bucket - 1].some((b) => qe.getBucket('k1', key(d), b) === 3.75))
})

test('store drivers are numbered: 0 is SQLite, each Redis URL keeps one number; a bad URL or number is a RangeError naming it', () => {
  assert.equal(native.storeDriver(), 0)
  assert.equal(native.storeDriver(null), 0)
  assert.equal(sqliteDriver.number, 0)
  assert.equal(sqliteDriver.driver, 'sqlite')
  const a = native.storeDriver('redis://127.0.0.1:1/0') // nothing connects
  const b = native.storeDriver('redis://127.0.0.1:2/0')
  assert.ok(a >= 1 && b >= 1 && a !== b, `${a}, ${b}`)
  assert.equal(native.storeDriver('redis://127.0.0.1:1/0'), a)
  assert.equal(new StoreDriver('redis://127.0.0.1:2/0').number, b)
  assert.equal(new StoreDriver('redis://127.0.0.1:2/0').driver, 'redis')
  assert.throws(() => native.storeDriver('http://127.0.0.1:1'), isInvalidAny('url'))
  for (const bad of [4_000_000, -1, 1.5, NaN, Infinity, 2 ** 53, '0', null]) {
    assert.throws(() => native.storePeek(bad, 'k', {}, 'p', 'requests', 'hourly'), isInvalidAny('driver'), String(bad))
  }
})

test('bucket rotation and decay with injected time', () => {
  const d = dim('decay-pool', 'tokens', 'hourly')
  const W = WINDOW_MS.hourly
  const b = 500_000 // bucket index
  const start = b * W
  assert.equal(sqliteDriver.consume('dk', d, 100, start + 10), 100)
  assert.equal(sqliteDriver.consume('dk', d, 20, start + W - 1), 120)
  assert.equal(qe.getBucket('dk', key(d), b), 120)
  // next bucket: prev weight 1 at its start, 0.5 halfway, ~0 at its end
  assert.equal(sqliteDriver.peek('dk', d, start + W), 120)
  assert.equal(sqliteDriver.peek('dk', d, start + W + W / 2), 60)
  assert.ok(Math.abs(sqliteDriver.peek('dk', d, start + 2 * W - 1) - 120 / W) < 1e-9)
  assert.equal(sqliteDriver.consume('dk', d, 10, start + W + W / 2), 70) // 60 + 10
  assert.deepEqual(qe.getPair('dk', key(d), b + 1), { curr: 10, prev: 120 })
  // two buckets later the old one no longer counts; only the b+1 bucket as prev, at 0 weight at end
  assert.equal(sqliteDriver.peek('dk', d, start + 2 * W), 10)
  assert.equal(sqliteDriver.peek('dk', d, start + 3 * W), 0)
  // pool total applies the same formula to the summed buckets
  sqliteDriver.consume('dk2', d, 30, start + 10)
  assert.equal(sqliteDriver.poolConsumedTotal(d, start + W + W / 2), (120 + 30) / 2 + 10)
  assert.deepEqual(qe.sumPoolDimension(key(d), b + 1), { currTotal: 10, prevTotal: 150 })
})

test('counter functions: incrementBucket, getBucket, getPair with explicit buckets', () => {
  const k = 'cnt-pool:usd:daily'
  qe.incrementBucket('ck', k, 10, 1.25, Date.now())
  qe.incrementBucket('ck', k, 10, 1.25, Date.now())
  qe.incrementBucket('ck', k, 9, 4, Date.now())
  assert.equal(qe.getBucket('ck', k, 10), 2.5)
  assert.equal(qe.getBucket('ck', k, 11), 0)
  assert.deepEqual(qe.getPair('ck', k, 10), { curr: 2.5, prev: 4 })
  assert.deepEqual(qe.getPair('nobody', k, 10), { curr: 0, prev: 0 })
})

const isRange = (field) => (err) => err instanceof RangeError && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.includes(field)

test('incrementBucket: a negative or non-finite delta is a RangeError and writes nothing; a huge one saturates at 1e15', () => {
  const k = 'bad-delta:tokens:daily'
  qe.incrementBucket('bk', k, 3, 40, Date.now())
  // A negative delta took a pool total below 0 (to −39).
  for (const delta of [-1, -79, NaN, Infinity, -Infinity]) {
    assert.throws(() => qe.incrementBucket('bk', k, 3, delta, Date.now()), isRange('delta'))
  }
  assert.equal(qe.getBucket('bk', k, 3), 40)
  assert.deepEqual(qe.sumPoolDimension(k, 3), { currTotal: 40, prevTotal: 0 })
  qe.incrementBucket('bk', k, 3, Number.MAX_VALUE, Date.now())
  qe.incrementBucket('bk', k, 3, Number.MAX_VALUE, Date.now())
  assert.equal(qe.getBucket('bk', k, 3), 1e15)
})

test('counter functions: a bucket index that is NaN, ±Infinity, a fraction or unsafe is a RangeError', () => {
  const k = 'bad-bucket:tokens:daily'
  // NaN was bucket 0, ±Infinity i64::MAX.
  for (const bucket of [NaN, Infinity, -Infinity, 2.5, 2 ** 60]) {
    assert.throws(() => qe.incrementBucket('bk', k, bucket, 1, Date.now()), isRange('bucketIndex'))
    assert.throws(() => qe.getBucket('bk', k, bucket), isRange('bucketIndex'))
    assert.throws(() => qe.getPair('bk', k, bucket), isRange('currentBucket'))
    assert.throws(() => qe.sumPoolDimension(k, bucket), isRange('currentBucket'))
  }
  assert.throws(() => qe.incrementBucket('bk', k, 3, 1, NaN), isRange('nowMs'))
  assert.equal(count(`quota_consumption WHERE dimension_key = '${k}'`), 0)
})

test('gcOlderThan(NaN or ±Infinity) is a RangeError and deletes nothing', () => {
  qe.incrementBucket('gk', 'gc-bad:tokens:daily', 3, 1, 5)
  for (const t of [NaN, Infinity, -Infinity]) {
    // The value as JavaScript writes it.
    assert.throws(() => qe.gcOlderThan(t), (err) => isRange('maxUpdatedAtMs')(err) && err.message.endsWith(`got ${t}`))
  }
  assert.equal(qe.getBucket('gk', 'gc-bad:tokens:daily', 3), 1)
  // Strictly older, a fraction too: the row at 5 is not older than 5, and is older than 5.5.
  assert.equal(qe.gcOlderThan(5), 0)
  assert.equal(qe.gcOlderThan(5.5), 1)
})

test('listConsumptionForPool clamps its limit to 1..500, ±Infinity included', () => {
  for (const key of ['l1', 'l2', 'l3']) qe.incrementBucket(key, 'limits-pool:requests:hourly', 7, 1, Date.now())
  const rows = (limit) => qe.listConsumptionForPool('limits-pool', limit).length
  assert.deepEqual([-Infinity, -5, 0, 1.5, 2, Infinity, NaN, undefined].map(rows), [1, 1, 1, 1, 2, 3, 3, 3])
})

test('rows poisoned by an older version (Infinity) can be cleared, collected and repaired', async () => {
  const d = dim('poison-pool', 'tokens', 'daily')
  const bucket = Math.floor(Date.now() / WINDOW_MS.daily)
  const insert = host.prepare('INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?,?,?,?,?)')
  const poison = (updatedAt) => {
    insert.run('pa', key(d), bucket, Infinity, updatedAt)
    insert.run('pb', key(d), bucket, Infinity, updatedAt)
  }
  // store.clear failed: NOT NULL constraint failed: quota_consumption_totals.consumed.
  poison(Date.now())
  await store.clear('pa', d)
  assert.ok(Number.isFinite(await store.poolConsumedTotal(d.poolId, d)))
  await store.clear('pb', d)
  assert.equal(await store.poolConsumedTotal(d.poolId, d), 0)
  // gcConsumption failed on every run from then on.
  poison(1)
  assert.ok((await qe.gcConsumption()) >= 2)
  assert.equal(count(`quota_consumption WHERE dimension_key = '${key(d)}'`), 0)
  // The repair saturates them into range.
  poison(Date.now())
  assert.deepEqual(native.repairCounters(), { rows: 2, totals: 0 })
  assert.equal(qe.getBucket('pa', key(d), bucket), 1e15)
  assert.equal(await store.poolConsumedTotal(d.poolId, d), 2e15)
  await store.clear('pa', d)
  await store.clear('pb', d)
})

test('rows the host writes through its own connection are seen by the very next engine call', async () => {
  const d = dim('host-pool', 'requests', 'daily')
  const bucket = Math.floor(Date.now() / WINDOW_MS.daily)
  host.prepare('INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?,?,?,?,?)')
    .run('hk', key(d), bucket, 11, Date.now())
  assert.equal(await store.peek('hk', d), 11)
  host.prepare(`INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?,?,?,?,?)
    ON CONFLICT(api_key_id, dimension_key, bucket_index) DO UPDATE SET consumed = consumed + excluded.consumed`)
    .run('hk', key(d), bucket, 4, Date.now())
  assert.equal(qe.getBucket('hk', key(d), bucket), 15)
  assert.equal(await store.poolConsumedTotal('host-pool', d), 15)
  assert.equal(await store.consume('hk', d, 1), 16)

  host.prepare('INSERT INTO quota_pools (id, connection_id, name, group_id) VALUES (?,?,?,?)').run('hp1', 'hconn', 'host made', 'g1')
  host.prepare('INSERT INTO quota_allocations (pool_id, api_key_id, weight, policy) VALUES (?,?,?,?)').run('hp1', 'hk', 25, 'soft')
  const pool = qe.getPool('hp1')
  assert.equal(pool.name, 'host made')
  assert.deepEqual(pool.connectionIds, ['hconn'])
  assert.equal(pool.groupId, 'g1')
  assert.equal(pool.allocations.length, 1)
  assert.equal(pool.allocations[0].weight, 25)
  assert.equal(pool.allocations[0].policy, 'soft')
  assert.ok(qe.listAllocationsForApiKey('hk').some((a) => a.poolId === 'hp1' && a.allocation.weight === 25))
  host.prepare('UPDATE quota_allocations SET weight = 75 WHERE pool_id = ?').run('hp1')
  assert.equal(qe.getPool('hp1').allocations[0].weight, 75)

  host.prepare('INSERT INTO provider_plans (connection_id, provider, dimensions_json, source) VALUES (?,?,?,?)')
    .run('hconn', 'kimi', JSON.stringify([{ unit: 'requests', window: 'daily', limit: 40 }]), 'manual')
  const plan = qe.getProviderPlan('hconn')
  assert.equal(plan.provider, 'kimi')
  assert.deepEqual(plan.dimensions, [{ unit: 'requests', window: 'daily', limit: 40 }])
  assert.deepEqual((await store.poolUsage('hp1')).dimensions, []) // poolUsage carries no plan
  host.prepare('INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?,?,?,?,?)')
    .run('hk', 'hp1:requests:daily', bucket, 16, Date.now())
  const snap = await store.poolUsageWithDimensions('hp1', plan.dimensions)
  assert.equal(snap.dimensions.length, 1)
  assert.equal(snap.dimensions[0].limit, 40)
  assert.equal(snap.dimensions[0].perKey[0].fairShare, 30)
  assert.equal(snap.dimensions[0].perKey[0].consumed, 16)
  host.prepare('DELETE FROM provider_plans WHERE connection_id = ?').run('hconn')
  assert.equal(qe.getProviderPlan('hconn'), null)
})

test('pool totals stay exact with host upserts interleaved with engine consumes', async () => {
  const d = dim('mix-pool', 'tokens', 'weekly')
  const bucket = Math.floor(Date.now() / WINDOW_MS.weekly)
  const up = host.prepare(`INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?,?,?,?,?)
    ON CONFLICT(api_key_id, dimension_key, bucket_index) DO UPDATE SET consumed = consumed + excluded.consumed, updated_at = excluded.updated_at`)
  let expected = 0
  for (let i = 0; i < 300; i++) {
    const k = `m${i % 7}`
    if (i % 3 === 0) up.run(k, key(d), bucket, i % 5 + 1, Date.now())
    else await store.consume(k, d, i % 4 + 1)
    expected += i % 3 === 0 ? i % 5 + 1 : i % 4 + 1
    if (i % 50 === 49) {
      assert.equal(qe.flushQuotaWrites(), null) // the engine's consumes are buffered
      const brute = host.prepare('SELECT sum(consumed) AS s FROM quota_consumption WHERE dimension_key = ? AND bucket_index = ?').get(key(d), bucket).s
      assert.equal(brute, expected)
      assert.equal(await store.poolConsumedTotal('mix-pool', d), brute)
      assert.equal(qe.sumPoolDimension(key(d), bucket).currTotal, brute)
    }
  }
})

test('metadata validation: right class, field named, nothing written', () => {
  const tables = ['quota_pools', 'quota_allocations', 'quota_pool_connections', 'provider_plans', 'quota_allocation_model_caps']
  const snapshot = () => Object.fromEntries(tables.map((t) => [t, count(t)]))
  const base = qe.createPool({ connectionId: 'conn-val', name: 'val', allocations: [{ apiKeyId: 'v1', weight: 10, policy: 'hard' }] })
  const before = snapshot()
  const cases = [
    () => qe.createPool({ connectionId: 'c', name: 'n', allocations: [{ apiKeyId: 'a', weight: 150, policy: 'hard' }] }),
    () => qe.createPool({ connectionId: 'c', name: 'n', allocations: [{ apiKeyId: 'a', weight: 10, capValue: 0, capUnit: 'usd', policy: 'hard' }] }),
    () => qe.createPool({ connectionId: 'c', name: 'n', allocations: [{ apiKeyId: 'a', weight: 10, capValue: 5, capUnit: 'bytes', policy: 'hard' }] }),
    () => qe.createPool({ connectionId: 'c', name: 'n', allocations: [{ apiKeyId: 'a', weight: 10, policy: 'greedy' }] }),
    () => qe.createPool({ connectionId: '', name: 'n' }),
    () => qe.createPool({ connectionId: 'c', name: 'n', allocations: [{ apiKeyId: '', weight: 10, policy: 'hard' }] }),
    () => qe.upsertAllocations(base.id, [{ apiKeyId: 'v1', weight: 150, policy: 'hard' }]),
    () => qe.upsertAllocations(base.id, [{ apiKeyId: 'v2', weight: -1, policy: 'hard' }]),
    () => qe.updatePool(base.id, { allocations: [{ apiKeyId: 'v1', weight: 101, policy: 'hard' }] }),
    () => qe.upsertProviderPlan({ connectionId: 'pc', provider: 'x', dimensions: [{ unit: 'tokens', window: 'daily', limit: 0 }], source: 'manual' }),
    () => qe.upsertProviderPlan({ connectionId: 'pc', provider: 'x', dimensions: [{ unit: 'tokens', window: 'yearly', limit: 5 }], source: 'manual' }),
    () => qe.upsertProviderPlan({ connectionId: 'pc', provider: 'x', dimensions: [{ unit: 'bytes', window: 'daily', limit: 5 }], source: 'manual' }),
    () => qe.setModelCap({ poolId: base.id, apiKeyId: 'v1', model: 'm', capValue: 0, capUnit: 'tokens' }),
    () => qe.setModelCap({ poolId: base.id, apiKeyId: 'v1', model: 'm', capValue: 5, capUnit: 'bytes' }),
    () => qe.setModelCap({ poolId: '', apiKeyId: 'v1', model: 'm', capValue: 5, capUnit: 'tokens' }),
  ]
  const fields = ['weight', 'capValue', 'capUnit', 'policy', 'connectionId', 'apiKeyId', 'weight', 'weight', 'weight', 'limit', 'window', 'unit', 'capValue', 'capUnit', 'poolId']
  cases.forEach((fn, i) => {
    assert.throws(fn, isInvalidAny(fields[i]), `case ${i}`)
  })
  // exact classes for the headline cases
  assert.throws(cases[0], (e) => e instanceof RangeError)
  // Every check names the value from the argument, as the argument readers do.
  assert.throws(cases[0], { message: 'input.allocations[0].weight: must be a finite number from 0 to 100, got 150' })
  assert.throws(cases[2], { message: /^input\.allocations\[0\]\.capUnit: / })
  assert.throws(cases[6], { message: /^allocations\[0\]\.weight: / })
  assert.throws(cases[8], { message: /^patch\.allocations\[0\]\.weight: / })
  assert.throws(cases[9], { message: /^plan\.dimensions\[0\]\.limit: / })
  assert.throws(cases[12], { message: /^cap\.capValue: / })
  assert.throws(cases[12], (e) => e instanceof RangeError)
  assert.deepEqual(snapshot(), before)
  assert.equal(qe.getPool(base.id).allocations[0].weight, 10)
})

test('listPools reads limit and offset as the host does: a limit not > 0 lists every pool, an offset counts only with a limit', () => {
  for (let i = 0; i < 3; i++) qe.createPool({ connectionId: `page-conn-${i}`, name: `page ${i}` })
  const all = qe.listPools().items.map((p) => p.id)
  assert.ok(all.length >= 3)
  const ids = (options) => qe.listPools(options).items.map((p) => p.id)
  for (const limit of [-1, 0, Number.NaN, undefined, null]) {
    assert.deepEqual(ids({ limit }), all, `limit ${limit}`)
    assert.deepEqual(ids({ limit, offset: 1 }), all, `limit ${limit} with an offset`)
  }
  assert.deepEqual(ids({ limit: 1, offset: 1 }), [all[1]])
  assert.deepEqual(ids({ limit: 2, offset: -5 }), all.slice(0, 2))
  assert.equal(qe.listPools({ limit: 1 }).total, all.length)
})

test('importLegacyPools refuses a pool id with a \':\' (it would make counter keys ambiguous), writing nothing', () => {
  const n = count('quota_pools')
  assert.throws(
    () => qe.importLegacyPools([{ id: 'x:p', connectionId: 'lc', name: 'colon', allocations: [] }]),
    (e) => e instanceof RangeError && e.code === 'ERR_QUOTA_INVALID_ARG' && /pools\[0\]\.id/.test(e.message) && /must not contain ':'/.test(e.message),
  )
  assert.equal(count('quota_pools'), n)
})

test('importLegacyPools refuses a createdAt that is no ISO-8601 date-time, naming it and writing nothing', () => {
  const n = count('quota_pools')
  for (const createdAt of ['not a date', '2024-02-30T00:00:00Z', '+275760-09-13T00:00:00.000Z']) {
    assert.throws(() => qe.importLegacyPools([{ id: 'dated', connectionId: 'lc', name: 'dated', createdAt, allocations: [] }]), {
      name: 'RangeError',
      code: 'ERR_QUOTA_INVALID_ARG',
      message: `pools[0].createdAt: must be an ISO-8601 date-time, got ${JSON.stringify(createdAt)}`,
    })
  }
  assert.equal(count('quota_pools'), n)
})

test('importLegacyPools imports once; the second call is a no-op', () => {
  // a fresh file is needed for "no pool exists yet": check only the second-call no-op here
  const n = count('quota_pools')
  const legacy = [{ id: 'legacy-1', connectionId: 'lc', name: 'legacy', allocations: [{ apiKeyId: 'l1', weight: 50, policy: 'hard' }] }]
  qe.importLegacyPools(legacy)
  const after1 = count('quota_pools')
  assert.equal(after1, n, 'pools exist already, so even the first call imports nothing')
  qe.importLegacyPools(legacy)
  assert.equal(count('quota_pools'), after1)
})
