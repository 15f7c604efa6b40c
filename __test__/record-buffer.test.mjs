// recordConsumption's buffered writes (store/sqlite/record_buffer.rs): the engine's own reads count a
// record at once; the host's connection sees it once the flush timer commits it, within
// QUOTA_RECORD_FLUSH_MS (or at flushQuotaWrites()); a file replaced or renamed away keeps or
// reports its buffered records; a process that ends — normally, by process.exit(), by an uncaught
// exception — commits what it buffered, so counters stay exact across processes and
// threads. And the hot path's decisions from memory never hide another connection's commit.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import fs from 'node:fs'
import { spawn } from 'node:child_process'
import { Worker } from 'node:worker_threads'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { makeDataDir, openHost, loadEngine } from './support/store-env.mjs'

const require = createRequire(import.meta.url)
const dataDir = makeDataDir('buffer')
const dbFile = path.join(dataDir, 'storage.sqlite')
const recordWorker = fileURLToPath(new URL('./support/record-worker.mjs', import.meta.url))
const engine = loadEngine()
const { enforceQuotaShare, recordConsumption, flushQuotaWrites, createPool, upsertProviderPlan, closeQuotaDb, installHost } = engine
const HOUR = 3_600_000
const nextTurn = () => new Promise((resolve) => setImmediate(resolve))

after(() => {
  closeQuotaDb()
  fs.rmSync(dataDir, { recursive: true, force: true })
})

let seq = 0
/** A pool with one hard key at weight 100 and a plan of `limit` requests (and 1e12 tokens) an hour. */
function pool(limit) {
  const tag = `b${++seq}`
  const request = { apiKeyId: `key-${tag}`, connectionId: `conn-${tag}`, provider: `acme-${tag}` }
  const created = createPool({ connectionId: request.connectionId, name: tag, allocations: [{ apiKeyId: request.apiKeyId, weight: 100, policy: 'hard' }] })
  upsertProviderPlan({
    connectionId: request.connectionId,
    provider: request.provider,
    dimensions: [
      { unit: 'requests', window: 'hourly', limit },
      { unit: 'tokens', window: 'hourly', limit: 1e12 },
    ],
    source: 'manual',
  })
  return { request, requestsKey: `${created.id}:requests:hourly`, tokensKey: `${created.id}:tokens:hourly` }
}

/** What the host's own connection sees committed for a key's counter this hour. */
function committed(apiKeyId, dimensionKey) {
  const host = openHost(dbFile)
  try {
    const row = host.prepare('SELECT consumed FROM quota_consumption WHERE api_key_id = ? AND dimension_key = ? AND bucket_index = ?').get(apiKeyId, dimensionKey, Math.floor(Date.now() / HOUR))
    return row ? row.consumed : 0
  } finally {
    host.close()
  }
}

test('a record counts for the very next decision, and reaches the host connection by the flush timer (QUOTA_RECORD_FLUSH_MS)', async () => {
  const p = pool(3)
  for (let i = 0; i < 3; i++) {
    assert.equal((await enforceQuotaShare(p.request)).kind, 'allow', `request ${i}`)
    await recordConsumption({ ...p.request, cost: { requests: 1 } })
  }
  // No turn of the event loop yet: the three records are buffered, and still count.
  assert.equal(committed(p.request.apiKeyId, p.requestsKey), 0)
  assert.equal((await enforceQuotaShare(p.request)).kind, 'block')
  // No further call: the engine's timer commits them (waited for here, not timed).
  while (committed(p.request.apiKeyId, p.requestsKey) < 3) await new Promise((resolve) => setTimeout(resolve, 5))
  assert.equal(committed(p.request.apiKeyId, p.requestsKey), 3)
  assert.equal((await enforceQuotaShare(p.request)).kind, 'block', 'counted once, not twice')
})

test('flushQuotaWrites() commits at once; with nothing buffered it is a no-op', async () => {
  const p = pool(100)
  await recordConsumption({ ...p.request, cost: { requests: 2, tokens: 50 } })
  assert.equal(flushQuotaWrites(), null)
  assert.equal(committed(p.request.apiKeyId, p.requestsKey), 2)
  assert.equal(committed(p.request.apiKeyId, p.tokensKey), 50)
  assert.equal(flushQuotaWrites(), null)
})

test('closeQuotaDb() commits the buffer before it closes', async () => {
  const p = pool(100)
  await recordConsumption({ ...p.request, cost: { requests: 4 } })
  closeQuotaDb()
  assert.equal(committed(p.request.apiKeyId, p.requestsKey), 4)
})

test("the host's commit is seen by the very next decision, also after decisions made from memory", async () => {
  const p = pool(10)
  for (let i = 0; i < 5; i++) assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
  const host = openHost(dbFile)
  try {
    host
      .prepare('INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?, ?, ?, 10, ?)')
      .run(p.request.apiKeyId, p.requestsKey, Math.floor(Date.now() / HOUR), Date.now())
    assert.equal((await enforceQuotaShare(p.request)).kind, 'block')
    // And metadata: the host raises the plan, the next decision allows.
    host
      .prepare("UPDATE provider_plans SET dimensions_json = ? WHERE connection_id = ?")
      .run(JSON.stringify([{ unit: 'requests', window: 'hourly', limit: 100 }]), p.request.connectionId)
    assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
  } finally {
    host.close()
  }
})

function runChild(args) {
  const child = spawn(process.execPath, [recordWorker, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stdout.on('data', (b) => { out += b })
  child.stderr.on('data', (b) => { err += b })
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, out, err })))
}

test('4 processes × 2 500 buffered records on one key, each ending its own way, give exactly 10 000', async () => {
  const p = pool(1e9)
  flushQuotaWrites()
  const { apiKeyId, connectionId, provider } = p.request
  const endings = ['natural', 'exit', 'throw', 'natural']
  const runs = await Promise.all(endings.map((ending) => runChild([dataDir, '2500', apiKeyId, connectionId, provider, ending])))
  runs.forEach((r, i) => {
    assert.match(r.out, /DONE 2500/, `${endings[i]}: ${r.err}`)
    assert.equal(r.code, endings[i] === 'throw' ? 1 : 0, r.err)
  })
  assert.equal(committed(apiKeyId, p.requestsKey), 10_000)
  assert.equal(committed(apiKeyId, p.tokensKey), 100_000)
  // This process sees them too, through its own (memory-served) decisions' next read.
  const usage = engine.getPair(apiKeyId, p.requestsKey, Math.floor(Date.now() / HOUR))
  assert.deepEqual(usage, { curr: 10_000, prev: 0 })
})

test('a record made in another process is seen by the next decision here once it is committed', async () => {
  const p = pool(50)
  assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
  const { apiKeyId, connectionId, provider } = p.request
  const r = await runChild([dataDir, '50', apiKeyId, connectionId, provider, 'natural'])
  assert.equal(r.code, 0, r.err)
  assert.equal((await enforceQuotaShare(p.request)).kind, 'block')
})

test('4 worker threads × 1 000 buffered records and 1 000 on the main thread give exactly 5 000', async () => {
  const p = pool(1e9)
  const source = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { recordConsumption } = require(workerData.entry)
    ;(async () => {
      for (let i = 0; i < workerData.count; i++) await recordConsumption({ ...workerData.request, cost: { requests: 1 } })
      parentPort.postMessage('done')
    })().catch((err) => parentPort.postMessage({ error: String(err && err.stack) }))
  `
  const entry = require.resolve('@omniroute/quota-engine')
  const workers = Array.from({ length: 4 }, () => new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData: { entry, request: p.request, count: 1000 } })
    worker.once('message', (value) => (value && value.error ? reject(new Error(value.error)) : worker.once('exit', resolve)))
    worker.once('error', reject)
  }))
  for (let i = 0; i < 1000; i++) await recordConsumption({ ...p.request, cost: { requests: 1 } })
  await Promise.all(workers)
  assert.equal(engine.getBucket(p.request.apiKeyId, p.requestsKey, Math.floor(Date.now() / HOUR)), 5000)
  assert.equal(flushQuotaWrites(), null)
  assert.equal(committed(p.request.apiKeyId, p.requestsKey), 5000)
})

test('QUOTA_RECORD_FLUSH_MS: a bad value warns once and keeps the default; 0 commits inside the call', async () => {
  const warnings = []
  installHost({ logger: { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} } })
  const p = pool(100)
  try {
    process.env.QUOTA_RECORD_FLUSH_MS = 'soon'
    await recordConsumption({ ...p.request, cost: { requests: 1 } })
    await recordConsumption({ ...p.request, cost: { requests: 1 } })
    assert.deepEqual(warnings.map((w) => [w.component, w.msg]), [['quota:config', 'QUOTA_RECORD_FLUSH_MS="soon" is not a number in 0..60000; using 10']])
    assert.equal(committed(p.request.apiKeyId, p.requestsKey), 0, 'buffered, as by default')
    process.env.QUOTA_RECORD_FLUSH_MS = '0'
    await recordConsumption({ ...p.request, cost: { requests: 1 } })
    assert.equal(committed(p.request.apiKeyId, p.requestsKey), 3, 'write-through commits the buffer with it')
  } finally {
    delete process.env.QUOTA_RECORD_FLUSH_MS
    installHost({})
  }
})

test('a worker terminated before its flush ran: its records are committed at its teardown', async () => {
  const p = pool(1e9)
  const source = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { recordConsumption } = require(workerData.entry)
    ;(async () => {
      for (let i = 0; i < 5; i++) await recordConsumption({ ...workerData.request, cost: { requests: 1 } })
      parentPort.postMessage('recorded')
      // Never turn the event loop again: the scheduled flush cannot run here.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10_000)
    })()
  `
  const entry = require.resolve('@omniroute/quota-engine')
  const worker = new Worker(source, { eval: true, workerData: { entry, request: p.request } })
  await new Promise((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  assert.equal(committed(p.request.apiKeyId, p.requestsKey), 0, 'still buffered')
  await worker.terminate()
  assert.equal(committed(p.request.apiKeyId, p.requestsKey), 5)
})

test('a flush never recreates a deleted data folder', async () => {
  const dir = fs.mkdtempSync(path.join(path.dirname(dataDir), 'qe-buffer-gone-'))
  const file = path.join(dir, 'storage.sqlite')
  installHost({ dbPath: file })
  try {
    const p = pool(100)
    await recordConsumption({ ...p.request, cost: { requests: 1 } })
    fs.rmSync(dir, { recursive: true, force: true })
    assert.equal(flushQuotaWrites(), null)
    await nextTurn()
    assert.equal(fs.existsSync(dir), false)
  } finally {
    installHost({})
    closeQuotaDb()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('decisions from memory are never older than a commit made before the call (the host commits from another thread)', async () => {
  const dim = { poolId: 'fresh-reads', unit: 'requests', window: 'hourly' }
  const hour = Math.floor(Date.now() / HOUR)
  if (Date.now() - hour * HOUR > HOUR - 60_000) await new Promise((resolve) => setTimeout(resolve, 61_000)) // not across an hour
  const store = engine.getSqliteQuotaStore()
  await store.peek('writer', dim) // the file and schema exist
  const shared = new Int32Array(new SharedArrayBuffer(8))
  // The host's better-sqlite3 (its own SQLite copy) in a worker: commit i, then publish i.
  const source = `
    const { workerData } = require('node:worker_threads')
    const Database = require(workerData.betterSqlite3)
    const db = new Database(workerData.file)
    db.pragma('journal_mode = WAL'); db.pragma('busy_timeout = 2000')
    const put = db.prepare('INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?, ?, ?, ?, 0) ON CONFLICT (api_key_id, dimension_key, bucket_index) DO UPDATE SET consumed = excluded.consumed')
    const bucket = Math.floor(Date.now() / 3600000)
    for (let i = 1; i <= workerData.commits; i++) {
      put.run('writer', 'fresh-reads:requests:hourly', bucket, i)
      Atomics.store(workerData.shared, 0, i)
    }
    Atomics.store(workerData.shared, 1, 1)
    db.close()
  `
  const worker = new Worker(source, { eval: true, workerData: { betterSqlite3: require.resolve('better-sqlite3'), file: dbFile, commits: 3000, shared } })
  const done = new Promise((resolve, reject) => { worker.once('exit', resolve); worker.once('error', reject) })
  let reads = 0
  let stale = 0
  while (Atomics.load(shared, 1) === 0) {
    const published = Atomics.load(shared, 0)
    const seen = await store.peek('writer', dim) // this bucket only: no decay, exactly `curr`
    if (seen < published) stale++
    reads++
  }
  await done
  assert.equal(stale, 0, `${stale} of ${reads} reads were older than a commit made before them`)
  assert.ok(reads > 100, `the reads raced the writer (${reads})`)
  assert.equal(await store.peek('writer', dim), 3000)
})

/** A fresh database file of its own, for the tests that replace or move it. */
function ownFile(tag) {
  const dir = fs.mkdtempSync(path.join(path.dirname(dataDir), `qe-buffer-${tag}-`))
  return { dir, file: path.join(dir, 'storage.sqlite') }
}

function countersIn(file, apiKeyId, dimensionKey) {
  const db = openHost(file)
  try {
    return db.prepare('SELECT sum(consumed) AS s FROM quota_consumption WHERE api_key_id = ? AND dimension_key = ?').get(apiKeyId, dimensionKey).s ?? 0
  } finally {
    db.close()
  }
}

/**
 * Runs `body({ dir, file, warnings, p })` on a file of its own, installed as the host's
 * dbPath, with a pool and records held in the buffer (no timer commit).
 */
async function withOwnFile(name, body) {
  const { dir, file } = ownFile(name)
  const warnings = []
  installHost({ dbPath: file, logger: { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} } })
  closeQuotaDb() // the next call opens the file just installed
  process.env.QUOTA_RECORD_FLUSH_MS = '60000'
  try {
    const p = pool(1e9)
    flushQuotaWrites()
    await body({ dir, file, warnings, p })
  } finally {
    delete process.env.QUOTA_RECORD_FLUSH_MS
    installHost({})
    closeQuotaDb()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

test('the database file replaced (a rename over it) with records buffered: they are committed to the new file, with a warning', async () => {
  await withOwnFile('replaced', async ({ file, warnings, p }) => {
    for (let i = 0; i < 50; i++) await recordConsumption({ ...p.request, cost: { requests: 1 } })
    // A restored copy of the file (schema, pools and plans) is moved over it.
    const host = openHost(file)
    host.exec(`VACUUM INTO '${file}.restored'`)
    host.close()
    fs.renameSync(`${file}.restored`, file)
    assert.equal(flushQuotaWrites(), null)
    assert.equal(countersIn(file, p.request.apiKeyId, p.requestsKey), 50, 'the records are in the file at the path')
    const said = warnings.find((w) => /replaced while quota records were buffered/.test(w.msg))
    assert.ok(said, JSON.stringify(warnings))
    assert.equal(said.counters, 1)
    assert.equal(said.path, file)
  })
})

test('a record made after the file was deleted goes with the records buffered for it: it recreates no file, and the warning counts it', async () => {
  await withOwnFile('deleted', async ({ file, warnings, p }) => {
    for (let i = 0; i < 3; i++) await recordConsumption({ ...p.request, cost: { requests: 1 } })
    for (const suffix of ['', '-wal', '-shm']) fs.rmSync(file + suffix, { force: true })
    // A record only adds to the buffer: it looks at no file (docs/sqlite.md).
    await recordConsumption({ ...p.request, cost: { requests: 1, tokens: 2 } })
    assert.equal(fs.existsSync(file), false, 'a record does not recreate the file')
    assert.equal(flushQuotaWrites(), null)
    assert.equal(fs.existsSync(file), false, 'nor does the commit of the buffer')
    const said = warnings.find((w) => /deleted or renamed away while quota records were buffered/.test(w.msg))
    assert.ok(said, JSON.stringify(warnings))
    assert.equal(said.counters, 2, 'the requests counter and the tokens counter the last record added')
    // Nor does a decision, where the engine had the file (a restore puts one back): it allows.
    assert.deepEqual(await enforceQuotaShare(p.request), { kind: 'allow' })
    assert.equal(fs.existsSync(file), false, 'nor does a decision')
  })
})

test('the database file renamed away with records buffered: a warning says how many left the path and where they went', async () => {
  await withOwnFile('moved', async ({ dir, file, warnings, p }) => {
    for (let i = 0; i < 5; i++) await recordConsumption({ ...p.request, cost: { requests: 1, tokens: 3 } })
    for (const suffix of ['', '-wal', '-shm']) fs.renameSync(file + suffix, path.join(dir, `moved.sqlite${suffix}`))
    assert.equal(flushQuotaWrites(), null)
    assert.equal(fs.existsSync(file), false, 'no file is created at the path by a flush')
    const said = warnings.find((w) => /deleted or renamed away while quota records were buffered/.test(w.msg))
    assert.ok(said, JSON.stringify(warnings))
    assert.equal(said.counters, 2)
    assert.equal(said.path, file)
    assert.equal(countersIn(path.join(dir, 'moved.sqlite'), p.request.apiKeyId, p.requestsKey), 5, 'committed to the file under its new name')
  })
})
