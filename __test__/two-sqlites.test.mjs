// Two SQLite copies in one process (docs/contract.md §4, docs/two-sqlites.md): the host's
// better-sqlite3 and the engine's bundled SQLite share storage.sqlite; neither may drop the
// other's locks. An external python3 process is the witness (its checkpoint must be busy
// while a read transaction is open here).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import { execFileSync, spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'
import { makeDataDir, openHost, loadEngine } from './support/store-env.mjs'

const skip = process.platform !== 'linux' && process.platform !== 'darwin'
  ? 'Linux and macOS only: the engine uses OFD locks there; Windows locks are per handle (no hazard to test)'
  : (() => { try { execFileSync('python3', ['-c', 'import sqlite3']); return false } catch { return 'python3 with sqlite3 is needed as the external process' } })()

const dataDir = makeDataDir('two')
const dbFile = path.join(dataDir, 'storage.sqlite')
const ckpt = fileURLToPath(new URL('./support/checkpoint.py', import.meta.url))
const ckptLoop = fileURLToPath(new URL('./support/checkpoint-loop.py', import.meta.url))
const qe = skip ? null : loadEngine()
const native = createRequire(import.meta.url)('../binding.js')
const store = qe?.getSqliteQuotaStore()
const dim = (poolId, unit = 'requests', window = 'daily') => ({ poolId, unit, window })

function externalCheckpoint(integrity = false) {
  const out = execFileSync('python3', [ckpt, dbFile, ...(integrity ? ['integrity'] : [])], { encoding: 'utf8' })
  return JSON.parse(out.trim())
}

before(async () => {
  if (skip) return
  await store.consume('boot', dim('boot'), 1)
})
after(() => { if (!skip) qe.closeQuotaDb() })

test('host read lock survives every kind of engine activity', { skip }, async () => {
  const host = openHost(dbFile)
  try {
    // Witness sanity: without a reader the checkpoint completes.
    assert.equal(externalCheckpoint().busy, 0)
    host.prepare('BEGIN').run()
    const seen = host.prepare('SELECT count(*) AS n FROM quota_consumption').get().n
    const pool = qe.createPool({ connectionId: 'two-conn', name: 'two', allocations: [{ apiKeyId: 'ta', weight: 50, policy: 'hard' }] })
    for (let i = 0; i < 50; i++) {
      await store.consume('ta', dim(pool.id), 1)
      await store.peek('ta', dim(pool.id))
      await store.poolConsumedTotal(pool.id, dim(pool.id))
    }
    await store.poolUsage(pool.id)
    await store.poolUsageWithDimensions(pool.id, [{ unit: 'requests', window: 'daily', limit: 100 }])
    await store.clear('ta', dim('other'))
    qe.upsertAllocations(pool.id, [{ apiKeyId: 'tb', weight: 20, policy: 'soft' }])
    qe.updatePool(pool.id, { name: 'two-renamed' })
    qe.upsertProviderPlan({ connectionId: 'two-conn', provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit: 10 }], source: 'manual' })
    qe.getProviderPlan('two-conn')
    qe.setModelCap({ poolId: pool.id, apiKeyId: 'ta', model: 'm1', capValue: 5, capUnit: 'tokens' })
    qe.getModelCap(pool.id, 'ta', 'm1')
    qe.deleteModelCap(pool.id, 'ta', 'm1')
    qe.listPools({})
    qe.listAllocationsForApiKey('ta')
    qe.incrementBucket('ta', 'x:usd:daily', 1, 1, Date.now())
    qe.listConsumptionForPool(pool.id, 10)
    qe.gcOlderThan(0)
    await qe.gcConsumption()
    // The hot path, and the migration check the engine runs at open and on schema changes.
    qe.upsertProviderPlan({ connectionId: 'two-conn', provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1000 }], source: 'manual' })
    qe.upsertAllocations(pool.id, [{ apiKeyId: 'ta', weight: 50, policy: 'hard' }])
    for (let i = 0; i < 10; i++) {
      assert.equal((await qe.enforceQuotaShare({ apiKeyId: 'ta', connectionId: 'two-conn', provider: 'kimi' })).kind, 'allow')
      await qe.recordConsumption({ apiKeyId: 'ta', connectionId: 'two-conn', provider: 'kimi', cost: { tokens: 5 } })
    }
    assert.equal(native.__checkSchemaForTests(), false)
    const tmp = qe.createPool({ connectionId: 'tmp', name: 'tmp' })
    assert.equal(await qe.deletePool(tmp.id), true)
    // the host's snapshot is unchanged and its read mark still holds
    assert.equal(host.prepare('SELECT count(*) AS n FROM quota_consumption').get().n, seen)
    const r = externalCheckpoint()
    assert.equal(r.busy, 1, `external TRUNCATE checkpoint went through under the host's read transaction: ${JSON.stringify(r)}`)
    host.prepare('COMMIT').run()
    assert.equal(externalCheckpoint().busy, 0)
    assert.ok(host.prepare('SELECT count(*) AS n FROM quota_consumption').get().n > seen)
  } finally {
    if (host.inTransaction) host.prepare('ROLLBACK').run()
    host.close()
  }
})

test("the engine's read lock survives the host opening, querying and closing the file", { skip }, async () => {
  await store.consume('held', dim('held-pool'), 1)
  assert.equal(externalCheckpoint().busy, 0, 'witness sanity: no reader, the checkpoint completes')
  native.__holdReadTransactionForTests(true)
  try {
    for (let i = 0; i < 5; i++) {
      // The host's better-sqlite3 opens the same file in this process, queries and closes.
      const host = openHost(dbFile)
      host.prepare('SELECT count(*) FROM quota_consumption').get()
      host.prepare("INSERT OR REPLACE INTO key_value (namespace, key, value) VALUES ('test', 'cycle', ?)").run(String(i))
      host.close()
      const r = externalCheckpoint()
      assert.equal(r.busy, 1, `cycle ${i}: the host's close dropped the engine's read lock: ${JSON.stringify(r)}`)
    }
  } finally {
    native.__holdReadTransactionForTests(false)
  }
  assert.equal(externalCheckpoint().busy, 0, 'released: the checkpoint completes again')
  assert.equal(externalCheckpoint(true).integrity, 'ok')
})

test('open/query/close cycles of another better-sqlite3 connection keep reader A locked; engine writes stay consistent', { skip }, async () => {
  const a = openHost(dbFile)
  try {
    a.prepare('BEGIN').run()
    const before = a.prepare('SELECT coalesce(sum(consumed), 0) AS s FROM quota_consumption').get().s
    let written = 0
    for (let i = 0; i < 5; i++) {
      const b = openHost(dbFile)
      b.prepare('SELECT count(*) FROM quota_pools').get()
      b.close()
      await store.consume('cyc', dim('cyc-pool'), 2)
      assert.equal(qe.flushQuotaWrites(), null) // a write of the engine's in every cycle
      written += 2
      const r = externalCheckpoint()
      assert.equal(r.busy, 1, `cycle ${i}: reader A's lock was dropped: ${JSON.stringify(r)}`)
    }
    assert.equal(a.prepare('SELECT coalesce(sum(consumed), 0) AS s FROM quota_consumption').get().s, before)
    a.prepare('COMMIT').run()
    assert.equal(await store.peek('cyc', dim('cyc-pool')), written)
    assert.equal(a.prepare("SELECT sum(consumed) AS s FROM quota_consumption WHERE api_key_id='cyc'").get().s, written)
    const r = externalCheckpoint(true)
    assert.equal(r.integrity, 'ok')
    assert.equal(a.pragma('integrity_check', { simple: true }), 'ok')
  } finally {
    if (a.inTransaction) a.prepare('ROLLBACK').run()
    a.close()
  }
})

test('5 s stress: engine consumes, host upserts with reopen every 20 ops, external checkpointer', { skip, timeout: 30_000 }, async () => {
  const seconds = 5
  const child = spawn('python3', [ckptLoop, dbFile, String(seconds + 0.5)], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stdout.on('data', (b) => { out += b })
  child.stderr.on('data', (b) => { err += b })
  const exited = new Promise((resolve) => child.on('exit', resolve))

  const d = dim('stress-pool', 'tokens', 'daily')
  const dk = 'stress-pool:tokens:daily'
  const bucket = () => Math.floor(Date.now() / qe.WINDOW_MS.daily)
  const sums = { engine: 0, host: 0, sharedEngine: 0, sharedHost: 0 }
  let host = openHost(dbFile)
  let hostOps = 0
  const upsertSql = `INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?,?,?,?,?)
    ON CONFLICT(api_key_id, dimension_key, bucket_index) DO UPDATE SET consumed = consumed + excluded.consumed, updated_at = excluded.updated_at`
  const end = Date.now() + seconds * 1000
  const startBucket = bucket()
  let i = 0
  while (Date.now() < end) {
    i++
    const c = (i % 9) + 1
    if (i % 2 === 0) {
      const k = i % 4 === 0 ? 'shared' : 'eng'
      await store.consume(k, d, c)
      if (k === 'shared') sums.sharedEngine += c
      else sums.engine += c
    } else {
      const k = i % 3 === 0 ? 'shared' : 'hst'
      host.prepare(upsertSql).run(k, dk, bucket(), c, Date.now())
      if (k === 'shared') sums.sharedHost += c
      else sums.host += c
      if (++hostOps % 20 === 0) {
        host.close()
        host = openHost(dbFile)
      }
    }
    if (i % 64 === 0) await new Promise((r) => setImmediate(r))
  }
  assert.equal(bucket(), startBucket, 'the day rolled over during the run; rerun')
  const code = await exited
  assert.equal(code, 0, err)
  const ext = JSON.parse(out.trim())
  assert.equal(ext.integrity, 'ok')
  assert.equal(ext.errors, 0)
  assert.ok(ext.checkpoints > 10, JSON.stringify(ext))
  assert.ok(i > 1000, `only ${i} operations ran`)

  const q = (k) => host.prepare('SELECT coalesce(sum(consumed), 0) AS s FROM quota_consumption WHERE api_key_id = ? AND dimension_key = ?').get(k, dk).s
  assert.equal(q('eng'), sums.engine)
  assert.equal(q('hst'), sums.host)
  assert.equal(q('shared'), sums.sharedEngine + sums.sharedHost)
  assert.equal(await store.peek('eng', d), sums.engine)
  assert.equal(await store.peek('hst', d), sums.host)
  assert.equal(await store.peek('shared', d), sums.sharedEngine + sums.sharedHost)
  const total = sums.engine + sums.host + sums.sharedEngine + sums.sharedHost
  assert.equal(await store.poolConsumedTotal('stress-pool', d), total)
  assert.equal(qe.sumPoolDimension(dk, startBucket).currTotal, total)
  assert.equal(host.pragma('integrity_check', { simple: true }), 'ok')
  host.close()
  assert.equal(externalCheckpoint(true).integrity, 'ok')
})
