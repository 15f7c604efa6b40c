// The host's `dbPath` is a function that answers `undefined` until its database module has
// loaded. A call before then opens the default file (`$DATA_DIR/storage.sqlite`); once the
// function names the host's file, the next call is on that file, not on the default one,
// and so is every call after `installHost` names another file.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'
import { openHostDb } from '../bench/host.mjs'

const require = createRequire(import.meta.url)
const Database = require('better-sqlite3')
const engine = require('@omniroute/quota-engine')
const { enforceQuotaShare, recordConsumption } = require('@omniroute/quota-engine/compat/enforce')

const fallbackDir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-fallback-'))
const hostDir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-host-file-'))
process.env.DATA_DIR = fallbackDir
const fallbackFile = path.join(fallbackDir, 'storage.sqlite')
const hostFile = path.join(hostDir, 'storage.sqlite')
const warnings = []
const logger = { warn: (_fields, msg) => warnings.push(msg), info() {}, debug() {}, error() {} }
let loaded = false
engine.installHost({ dbPath: () => (loaded ? hostFile : undefined), logger })
const opened = []

after(() => {
  for (const db of opened) db.close()
  engine.closeQuotaDb()
  engine.installHost({})
  fs.rmSync(fallbackDir, { recursive: true, force: true })
  fs.rmSync(hostDir, { recursive: true, force: true })
})

const connectionId = 'late-conn'
const provider = 'late-provider'
const poolRows = (file, id) => {
  const db = new Database(file, { readonly: true })
  try {
    return db.prepare('SELECT count(*) AS n FROM quota_pools WHERE id = ?').get(id).n
  } finally {
    db.close()
  }
}
const counted = (db, poolId) =>
  db.prepare('SELECT coalesce(sum(consumed), 0) AS n FROM quota_consumption WHERE dimension_key = ?').get(`${poolId}:requests:hourly`).n

/** A pool of one key on the engine's file now, three requests on it; the host's count. */
async function poolWithRequests(host, name) {
  engine.upsertProviderPlan({ connectionId, provider, dimensions: [{ unit: 'requests', window: 'hourly', limit: 1e9 }], source: 'manual' })
  const pool = engine.createPool({ connectionId, name, allocations: [{ apiKeyId: `${name}-key`, weight: 100, policy: 'hard' }] })
  for (let i = 0; i < 3; i++) {
    const request = { apiKeyId: `${name}-key`, connectionId, provider }
    assert.equal((await enforceQuotaShare(request)).kind, 'allow')
    await recordConsumption({ ...request, cost: { requests: 1 } })
  }
  assert.equal(engine.flushQuotaWrites(), null)
  return { pool, count: counted(host, pool.id) }
}

test('a call before the host has a path opens the default file; the next call after it has one is on its file', async () => {
  assert.equal(engine.getPool('none-yet'), null)
  assert.ok(fs.existsSync(fallbackFile), 'the call before the host was ready opened the default file')

  const host = openHostDb(hostFile)
  opened.push(host)
  loaded = true
  // The resolver is asked again at most every 100 ms (the next test).
  await new Promise((resolve) => setTimeout(resolve, 150))
  const { pool, count } = await poolWithRequests(host, 'after-load')
  assert.equal(poolRows(hostFile, pool.id), 1, 'the pool is in the host file')
  assert.equal(count, 3, 'the requests are counted in the host file')
  assert.equal(poolRows(fallbackFile, pool.id), 0, 'nothing more went to the default file')
  // Said once, with the file used meanwhile.
  assert.equal(warnings.filter((m) => m.includes('returned undefined')).length, 1, warnings.join('\n'))
  assert.ok(warnings.some((m) => m.includes('returned undefined') && m.includes(fallbackFile)), warnings.join('\n'))
})

test('a file the engine made first takes the host\'s migrations whole: the host\'s own schema, indexes and groups', () => {
  const engineFirst = path.join(hostDir, 'engine-first.sqlite')
  const hostFirst = path.join(hostDir, 'host-first.sqlite')
  engine.installHost({ dbPath: engineFirst, logger })
  try {
    engine.createPool({ connectionId: 'early', name: 'early', allocations: [{ apiKeyId: 'early-key', weight: 100, policy: 'hard' }] })
    engine.closeQuotaDb()
  } finally {
    engine.installHost({ dbPath: () => (loaded ? hostFile : undefined), logger })
  }
  const [early, host] = [engineFirst, hostFirst].map((file) => {
    const db = openHostDb(file)
    opened.push(db)
    return db
  })
  const tables = ['quota_consumption', 'quota_pools', 'quota_allocations', 'quota_pool_connections', 'provider_plans', 'quota_allocation_model_caps', 'key_value', 'quota_groups']
  const columns = (db, table) => db.prepare(`SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info('${table}') ORDER BY cid`).all()
  const indexed = (db, table) =>
    db.prepare(`SELECT name FROM pragma_index_list('${table}') WHERE origin = 'c'`).all()
      .map(({ name }) => db.prepare(`SELECT group_concat(name) AS c FROM pragma_index_info('${name}')`).get().c)
      .sort()
  for (const table of tables) {
    assert.deepEqual(columns(early, table), columns(host, table), table)
    assert.deepEqual(indexed(early, table).filter((c) => !c.startsWith('dimension_key,updated_at')), indexed(host, table), `${table}: one index per column list`)
  }
  assert.deepEqual(early.prepare('SELECT id, name FROM quota_groups').all(), [{ id: 'group-demo', name: 'GroupDemo' }])
  for (const db of [early, host]) {
    assert.throws(() => db.prepare("INSERT INTO quota_allocation_model_caps VALUES ('p', 'k', 'm', 1, 'bytes')").run(), /CHECK constraint/)
    assert.throws(() => db.prepare("INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index) VALUES ('k', 'd', 1)").run(), /NOT NULL/)
  }
})

test('installHost naming another file: the next call is on it', async () => {
  const otherFile = path.join(hostDir, 'other.sqlite')
  const other = openHostDb(otherFile)
  opened.push(other)
  engine.installHost({ dbPath: otherFile, logger })
  const { pool, count } = await poolWithRequests(other, 'moved')
  assert.equal(poolRows(otherFile, pool.id), 1, 'the pool is in the file installHost named')
  assert.equal(count, 3)
  assert.equal(poolRows(hostFile, pool.id), 0, 'nothing went to the file named before')
})

test('records buffered for the file named before are committed to the file named now', async () => {
  const fromFile = path.join(hostDir, 'from.sqlite')
  const toFile = path.join(hostDir, 'to.sqlite')
  const from = openHostDb(fromFile)
  const to = openHostDb(toFile)
  opened.push(from, to)
  engine.installHost({ dbPath: fromFile, logger })
  const { pool } = await poolWithRequests(from, 'carried')
  process.env.QUOTA_RECORD_FLUSH_MS = '60000'
  try {
    const request = { apiKeyId: 'carried-key', connectionId, provider }
    assert.equal((await enforceQuotaShare(request)).kind, 'allow')
    for (let i = 0; i < 4; i++) await recordConsumption({ ...request, cost: { requests: 1 } })
    assert.equal(counted(from, pool.id), 3, 'the four records are buffered')
    warnings.length = 0
    engine.installHost({ dbPath: toFile, logger })
    assert.equal(engine.flushQuotaWrites(), null)
  } finally {
    delete process.env.QUOTA_RECORD_FLUSH_MS
  }
  assert.equal(counted(from, pool.id), 3, 'none of them committed to the file named before')
  assert.equal(counted(to, pool.id), 4, 'all four committed to the file named now')
  assert.ok(warnings.some((m) => m.includes('the database path changed while quota records were buffered')), warnings.join('\n'))
})

test('a resolver that throws until the host is ready is asked again at most every 100 ms, not on every call', async () => {
  engine.closeQuotaDb()
  let calls = 0
  const notReady = () => {
    calls++
    throw new Error('the database module has not loaded')
  }
  engine.installHost({ dbPath: notReady, logger })
  const request = { apiKeyId: 'early-key', connectionId, provider }
  const started = performance.now()
  for (let i = 0; i < 300; i++) {
    assert.equal((await enforceQuotaShare(request)).kind, 'allow')
    await recordConsumption({ ...request, cost: { requests: 1 } })
  }
  const ms = performance.now() - started
  // Once at installHost, once at the open, then once per 100 ms at most.
  assert.ok(calls >= 2 && calls <= 3 + Math.ceil(ms / 100), `${calls} calls in ${ms.toFixed(0)} ms for 300 requests`)
})

test('a dbPath string that is empty or has a NUL character is the option\'s RangeError, and nothing changes', () => {
  const file = path.join(hostDir, 'kept.sqlite')
  engine.installHost({ dbPath: file, logger })
  const kept = engine.createPool({ connectionId, name: 'kept' })
  for (const [dbPath, got] of [['', 'an empty string'], ['a\0b', 'a string with a NUL character']]) {
    // An empty name would be SQLite's private temporary database: every write lost at close.
    assert.throws(() => engine.installHost({ dbPath, logger }), {
      name: 'RangeError',
      code: 'ERR_QUOTA_INVALID_ARG',
      message: `options.dbPath: must be a file's path, got ${got}`,
    })
  }
  engine.closeQuotaDb()
  assert.equal(engine.getPool(kept.id)?.name, 'kept', 'the file named before is still the one used')
  assert.equal(poolRows(file, kept.id), 1)
})

test('a resolver answering a path with a NUL character is said, and the file it named before is kept', () => {
  const file = path.join(hostDir, 'before-nul.sqlite')
  let answer = file
  engine.installHost({ dbPath: () => answer, logger })
  const kept = engine.createPool({ connectionId, name: 'before-nul' })
  warnings.length = 0
  answer = `${file}\0x`
  engine.closeQuotaDb()
  assert.equal(engine.getPool(kept.id)?.name, 'before-nul')
  assert.ok(warnings.some((m) => m.includes('returned a path with a NUL character') && m.includes(file)), warnings.join('\n'))
})

test('installHost with a function on another thread replaces this thread\'s: every thread\'s calls go to the file it names', async () => {
  const mainFile = path.join(hostDir, 'main-fn.sqlite')
  const workerFile = path.join(hostDir, 'worker-fn.sqlite')
  engine.installHost({ dbPath: () => mainFile, logger })
  const first = engine.createPool({ connectionId, name: 'main-first' })
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads')
     const engine = require(workerData.entry)
     engine.installHost({ dbPath: () => workerData.file })
     parentPort.postMessage('installed')
     parentPort.once('message', () => {
       const pool = engine.createPool({ connectionId: 'late-conn', name: 'worker-later' })
       parentPort.postMessage(pool.id)
     })`,
    { eval: true, workerData: { entry: require.resolve('@omniroute/quota-engine'), file: workerFile } },
  )
  const next = () => new Promise((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  try {
    assert.equal(await next(), 'installed')
    const afterInstall = engine.createPool({ connectionId, name: 'main-after' })
    // A reopen on this thread asks no stale function: the worker's named the file.
    engine.closeQuotaDb()
    const afterClose = engine.createPool({ connectionId, name: 'main-after-close' })
    worker.postMessage('go')
    const fromWorker = await next()
    assert.equal(poolRows(mainFile, first.id), 1)
    for (const id of [afterInstall.id, afterClose.id, fromWorker]) {
      assert.equal(poolRows(workerFile, id), 1, `${id} is in the file the worker's function names`)
      assert.equal(poolRows(mainFile, id), 0, `${id} is not in the file of the function it replaced`)
    }
  } finally {
    await worker.terminate()
  }
})
