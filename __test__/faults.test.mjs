// Faults on the SQLite store. For each: every call resolves in bounded time — the hot path
// fails open (`enforceQuotaShare` → `{ kind: "allow" }`, `recordConsumption` resolves), the
// QuotaStore rejects with a typed error — the fault is logged once (not once per call), and
// the engine recovers by itself once the fault is gone. (enforce.test.mjs covers a bad path
// and a same-process lock; these are the faults of a running deployment.)
import { test, before, after, beforeEach } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn, execFileSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'
import Database from 'better-sqlite3'
import { enforceQuotaShare, recordConsumption } from '@omniroute/quota-engine/compat/enforce'
import { installHost } from '@omniroute/quota-engine/compat/host'
import { _clearSaturationCache } from '@omniroute/quota-engine/compat/saturationSignals'
import {
  closeQuotaDb,
  createPool,
  upsertProviderPlan,
  getSqliteQuotaStore,
  getBucket,
  getPool,
  resolvePlan,
  incrementBucket,
  flushQuotaWrites,
  metrics,
} from '@omniroute/quota-engine'

const here = path.dirname(fileURLToPath(import.meta.url))
const require = createRequire(import.meta.url)
const holdLock = path.join(here, 'support', 'hold-lock.mjs')
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-faults-'))
const HOUR = 3_600_000
const warnings = []
const infos = []
const logger = {
  warn: (obj, msg) => warnings.push({ ...obj, msg }),
  info: (obj, msg) => infos.push({ ...obj, msg }),
  debug() {},
}
const enforceWarnings = () => warnings.filter((w) => w.component === 'quota:enforce')
/** One turn of the event loop: the buffered records' scheduled flush runs. */
/** A counter as committed, read through a connection of its own (as the host would). */
function committed(dbPath, apiKeyId, dimensionKey) {
  const db = new Database(dbPath, { readonly: true })
  try {
    const row = db.prepare('SELECT consumed FROM quota_consumption WHERE api_key_id = ? AND dimension_key = ? AND bucket_index = ?').get(apiKeyId, dimensionKey, Math.floor(Date.now() / HOUR))
    return row ? row.consumed : 0
  } finally {
    db.close()
  }
}

let seq = 0
/** A folder and database path of its own for one test, installed as the host's dbPath. */
function freshDb(options = {}) {
  const dataDir = path.join(root, `case-${++seq}`, 'data')
  const dbPath = path.join(dataDir, 'storage.sqlite')
  closeQuotaDb()
  installHost({ dbPath: options.resolver ? () => dbPath : dbPath, logger, ...options.host })
  return { dataDir, dbPath }
}

/** A pool on `connectionId` with one hard key at weight 100 and a `limit`-request hourly plan. */
function poolWithPlan(tag, limit = 10) {
  const connectionId = `conn-${tag}`
  const apiKeyId = `key-${tag}`
  const provider = `acme-${tag}`
  const pool = createPool({ connectionId, name: tag, allocations: [{ apiKeyId, weight: 100, policy: 'hard' }] })
  upsertProviderPlan({ connectionId, provider, dimensions: [{ unit: 'requests', window: 'hourly', limit }], source: 'manual' })
  const request = { apiKeyId, connectionId, provider }
  const dimensionKey = `${pool.id}:requests:hourly`
  return { pool, request, dimensionKey, bucket: () => getBucket(apiKeyId, dimensionKey, Math.floor(Date.now() / HOUR)) }
}

async function timed(fn) {
  const started = performance.now()
  const value = await fn()
  return [value, performance.now() - started]
}

/** Starts the lock holder and resolves once it holds the lock. */
function holdLockFor(dbPath, mode, holdMs) {
  const child = spawn(process.execPath, [holdLock, dbPath, mode, String(holdMs)], { stdio: ['ignore', 'pipe', 'inherit'] })
  const lines = []
  const waiters = []
  child.stdout.setEncoding('utf8')
  child.stdout.on('data', (chunk) => {
    for (const line of chunk.split('\n').filter(Boolean)) {
      lines.push(line)
      for (const w of waiters.filter((w) => w.line === line)) w.resolve()
    }
  })
  const exited = new Promise((resolve) => child.on('exit', resolve))
  const waitFor = (line) =>
    lines.includes(line)
      ? Promise.resolve()
      : new Promise((resolve, reject) => {
          waiters.push({ line, resolve })
          exited.then((code) => reject(new Error(`lock holder exited (${code}) before "${line}"`)))
        })
  return { locked: waitFor('locked'), released: () => waitFor('released').then(() => exited) }
}

before(() => {
  process.env.DATA_DIR = path.join(root, 'decoy')
})

after(() => {
  closeQuotaDb()
  fs.rmSync(root, { recursive: true, force: true })
})

beforeEach(() => {
  warnings.length = 0
  infos.length = 0
  _clearSaturationCache()
})

test('locked by another process (BEGIN EXCLUSIVE, 5 s): enforce still decides, records stay buffered and count, one warning, then they land', async () => {
  const { dbPath } = freshDb()
  const p = poolWithPlan('lock', 10)
  for (let i = 0; i < 3; i++) await recordConsumption({ ...p.request, cost: {} })
  assert.equal(flushQuotaWrites(), null)
  assert.equal(committed(dbPath, p.request.apiKeyId, p.dimensionKey), 3, 'flushed')

  const holder = holdLockFor(dbPath, 'transaction', 5000)
  await holder.locked
  // WAL readers are not blocked by a writer: the real decision, at once.
  const [decision, enforceMs] = await timed(() => enforceQuotaShare(p.request))
  assert.deepEqual(decision, { kind: 'allow', deprioritize: false })
  assert.ok(enforceMs < 1000, `enforce took ${enforceMs} ms`)
  // Records return at once; their flush waits briefly for the lock, fails, keeps them.
  for (let i = 0; i < 2; i++) {
    const [, ms] = await timed(() => recordConsumption({ ...p.request, cost: {} }))
    assert.ok(ms < 500, `record took ${ms} ms`)
  }
  // The automatic flush (what the timer runs): waits briefly for the lock, fails, keeps them.
  const [flushError, flushMs] = await timed(async () => flushQuotaWrites())
  assert.match(flushError, /locked|busy/i)
  assert.ok(flushMs < 1000, `the flush took ${flushMs} ms`)
  assert.equal(enforceWarnings().length, 1, JSON.stringify(warnings))
  assert.match(enforceWarnings()[0].error, /locked|busy/i)
  assert.equal(enforceWarnings()[0].buffered, 1, 'one counter (key × dimension × bucket) is buffered')
  // The engine's own reads include what is buffered: the pool is at 5 of 10.
  assert.equal(p.bucket(), 5)
  assert.equal(committed(dbPath, p.request.apiKeyId, p.dimensionKey), 3)

  await holder.released()
  await recordConsumption({ ...p.request, cost: {} })
  assert.equal(flushQuotaWrites(), null)
  assert.equal(committed(dbPath, p.request.apiKeyId, p.dimensionKey), 6, 'nothing recorded during the lock was lost')
  assert.deepEqual(
    infos.filter((i) => i.component === 'quota:enforce').map((i) => i.msg),
    ['quota flush recovered'],
  )
  assert.equal(enforceWarnings().length, 1)
})

test('reserve admission meets another process\'s write lock: it waits briefly once, then decides unreserved (a full pool still blocks), warns once, and reserves again after', async () => {
  const { dbPath } = freshDb()
  const full = poolWithPlan('reserve-full', 2)
  const open = poolWithPlan('reserve-open', 10)
  const enforceErrors = () => Number(/quota_engine_store_errors_total\{operation="enforce"\} (\d+)/.exec(metrics())[1])
  const errorsBefore = enforceErrors()
  process.env.QUOTA_ADMISSION = 'reserve'
  try {
    for (let i = 0; i < 2; i++) await recordConsumption({ ...full.request, cost: {} })
    assert.equal(flushQuotaWrites(), null)
    const holder = holdLockFor(dbPath, 'transaction', 3000)
    await holder.locked
    const [blocked, blockMs] = await timed(() => enforceQuotaShare(full.request))
    assert.equal(blocked.kind, 'block', JSON.stringify(blocked))
    assert.ok(blockMs < 1000, `enforce took ${blockMs} ms`)
    // For a second after failing it does not try again: no wait at all.
    const [allowed, allowMs] = await timed(() => enforceQuotaShare(open.request))
    assert.deepEqual(allowed, { kind: 'allow', deprioritize: false }, 'allowed, with no reservation')
    assert.ok(allowMs < 50, `enforce took ${allowMs} ms`)
    // A decision that needs no lock (no pool for the key) is no recovery.
    await enforceQuotaShare({ apiKeyId: 'nobody', connectionId: 'conn-none', provider: 'none' })
    assert.deepEqual(infos.filter((i) => i.msg === 'quota reserve recovered'), [])
    assert.equal(enforceErrors(), errorsBefore + 1, 'the failed reservation is a store error of enforce')
    const reserveWarnings = enforceWarnings().filter((w) => w.msg.startsWith('quota reservation failed'))
    assert.equal(reserveWarnings.length, 1, JSON.stringify(warnings))
    assert.match(reserveWarnings[0].error, /locked|busy/i)
    await holder.released()
    const reserved = await enforceQuotaShare(open.request)
    assert.equal(typeof reserved.reservation, 'string', JSON.stringify(reserved))
    assert.deepEqual(
      infos.filter((i) => i.msg === 'quota reserve recovered').map((i) => i.failedCalls),
      [1],
    )
  } finally {
    delete process.env.QUOTA_ADMISSION
  }
})

test('the hourly retention sweep meets another process\'s write lock: it waits briefly and retries, enforce is never held up behind it', async (t) => {
  const { dbPath } = freshDb()
  const p = poolWithPlan('sweep', 1000)
  await enforceQuotaShare(p.request)
  // A row past the retention (14 days), written as another writer would.
  const db = new Database(dbPath)
  db.prepare('INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?, ?, 1, 1, 0)').run('old-key', p.dimensionKey)
  db.close()
  const oldRows = () => {
    const reader = new Database(dbPath, { readonly: true })
    try {
      return reader.prepare("SELECT COUNT(*) AS n FROM quota_consumption WHERE api_key_id = 'old-key'").get().n
    } finally {
      reader.close()
    }
  }
  const holder = holdLockFor(dbPath, 'transaction', 3000)
  await holder.locked
  require('../binding.js').__sweepOnAThreadForTests()
  let slowest = 0
  for (const until = Date.now() + 2500; Date.now() < until; ) {
    const [, ms] = await timed(() => enforceQuotaShare(p.request))
    slowest = Math.max(slowest, ms)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  // Each of the sweep's steps waits at most 100 ms for the lock before it lets go.
  assert.ok(slowest < 600, `the slowest enforce took ${slowest} ms`)
  t.diagnostic(`the slowest enforce while the sweep met the lock: ${slowest.toFixed(1)} ms`)
  await holder.released()
  for (const until = Date.now() + 5000; oldRows() > 0 && Date.now() < until; ) await new Promise((resolve) => setTimeout(resolve, 100))
  assert.equal(oldRows(), 0, 'the sweep got through once the lock was let go')
  await enforceQuotaShare(p.request)
  assert.deepEqual(warnings.filter((w) => w.msg === 'retention sweep failed'), [])
})

test('locked, with QUOTA_RECORD_FLUSH_MS=0 (write-through): each record waits out the busy timeout and warns once; the records are kept and land later', async () => {
  const { dbPath } = freshDb()
  const p = poolWithPlan('lock-through', 10)
  process.env.QUOTA_RECORD_FLUSH_MS = '0'
  try {
    await recordConsumption({ ...p.request, cost: {} })
    assert.equal(committed(dbPath, p.request.apiKeyId, p.dimensionKey), 1, 'committed inside the call')
    const holder = holdLockFor(dbPath, 'transaction', 5000)
    await holder.locked
    for (let i = 0; i < 2; i++) {
      const [, ms] = await timed(() => recordConsumption({ ...p.request, cost: {} }))
      assert.ok(ms >= 1500 && ms < 4000, `record took ${ms} ms`)
    }
    assert.equal(enforceWarnings().length, 1, JSON.stringify(warnings))
    assert.match(enforceWarnings()[0].error, /locked|busy/i)
    assert.equal(p.bucket(), 3, 'the failed records are still counted by the engine')
    await holder.released()
    await recordConsumption({ ...p.request, cost: {} })
    assert.equal(committed(dbPath, p.request.apiKeyId, p.dimensionKey), 4)
    assert.deepEqual(
      infos.filter((i) => i.component === 'quota:enforce').map((i) => [i.msg, i.failedCalls]),
      [['quota record recovered', 2]],
    )
  } finally {
    delete process.env.QUOTA_RECORD_FLUSH_MS
  }
})

test('closeQuotaDb() waits out the busy timeout to commit the buffer; what it must drop is said before it returns', async () => {
  const { dbPath } = freshDb()
  const p = poolWithPlan('close-locked', 100)
  const holder = holdLockFor(dbPath, 'transaction', 4000)
  await holder.locked
  await recordConsumption({ ...p.request, cost: {} }) // buffered; no turn before the close
  const [, ms] = await timed(async () => closeQuotaDb())
  assert.ok(ms >= 1500 && ms < 4000, `close took ${ms} ms`)
  const dropped = warnings.filter((w) => w.component === 'quota:store')
  assert.equal(dropped.length, 1, JSON.stringify(warnings))
  assert.match(dropped[0].msg, /closing the database dropped 1 buffered quota counters/)
  assert.match(dropped[0].detail, /locked/)
  await holder.released()
})

/** A child that records once, then ends by `ending` ('exit', or 'SIGTERM' with nobody else listening) while another process holds the write lock: its log lines and how it ended. */
async function leaveWithTheFileLocked(tag, ending) {
  const { dataDir, dbPath } = freshDb()
  const p = poolWithPlan(tag, 1e9)
  closeQuotaDb() // the child opens the file through DATA_DIR
  const holder = holdLockFor(dbPath, 'transaction', 8000)
  await holder.locked
  const worker = path.join(here, 'support', 'record-worker.mjs')
  const { apiKeyId, connectionId, provider } = p.request
  const args = [worker, dataDir, '3', apiKeyId, connectionId, provider, ending === 'exit' ? 'exit' : 'hold']
  // No flush timer before the end: on a loaded machine the signal can come later than a
  // 10 ms timer, whose failed commit would rightly be logged as retried.
  const env = { ...process.env, QUOTA_RECORD_FLUSH_MS: '60000' }
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (b) => {
    stdout += b
    if (ending !== 'exit' && stdout.includes('DONE')) child.kill(ending)
  })
  child.stderr.on('data', (b) => { stderr += b })
  const [code, signal] = await new Promise((resolve) => child.on('exit', (...end) => resolve(end)))
  await holder.released()
  return { code, signal, stderr, lines: stderr.split('\n').filter(Boolean).map((l) => JSON.parse(l)) }
}

for (const ending of ['exit', 'SIGTERM']) {
  test(`a process that ends (${ending}) while another holds the write lock says its records could not be committed, and nothing about retrying`, async () => {
    const { code, signal, stderr, lines } = await leaveWithTheFileLocked(`${ending}-locked`, ending)
    const expected = ending === 'exit' ? { code: 0, signal: null } : { code: null, signal: 'SIGTERM' }
    assert.deepEqual({ code, signal }, expected, stderr)
    const lost = lines.filter((l) => l.msg === `buffered quota records could not be committed at ${ending}`)
    assert.equal(lost.length, 1, stderr)
    assert.equal(lost[0].buffered, 1)
    assert.match(lost[0].error, /locked/)
    // The engine's own records of the end reach the logger too: the close that drops them.
    const dropped = lines.filter((l) => /closing the database dropped 1 buffered quota counters/.test(l.msg))
    assert.equal(dropped.length, 1, stderr)
    // Nothing is retried after the process ends, and no line says it is.
    assert.deepEqual(lines.filter((l) => /retried/.test(l.msg)), [], stderr)
  })
}

test('the database folder deleted under a running engine: the next calls work on a new file, then it fills up again', async () => {
  const { dataDir, dbPath } = freshDb()
  const p = poolWithPlan('deleted', 2)
  for (let i = 0; i < 2; i++) await recordConsumption({ ...p.request, cost: {} })
  assert.equal((await enforceQuotaShare(p.request)).kind, 'block')

  fs.rmSync(dataDir, { recursive: true, force: true }) // no closeQuotaDb()
  // A new, empty database: no pool any more, so allow — a decision, not a fault.
  assert.deepEqual(await enforceQuotaShare(p.request), { kind: 'allow' })
  assert.ok(fs.existsSync(dbPath), 'the engine recreated the file at the same path')
  await recordConsumption({ ...p.request, cost: {} })
  assert.equal(await getSqliteQuotaStore().consume('fresh', { poolId: 'x', unit: 'tokens', window: 'daily' }, 5), 5)
  assert.equal(enforceWarnings().length, 0, JSON.stringify(warnings))
  assert.ok(!fs.existsSync(path.join(process.env.DATA_DIR, 'storage.sqlite')))

  const again = poolWithPlan('deleted-again', 1)
  await recordConsumption({ ...again.request, cost: {} })
  assert.equal((await enforceQuotaShare(again.request)).kind, 'block')
})

test('the folder deleted with a dbPath resolver: the new file is at the resolver\'s path, not at $DATA_DIR', async () => {
  const { dataDir, dbPath } = freshDb({ resolver: true })
  const dim = { poolId: 'resolver', unit: 'requests', window: 'hourly' }
  assert.equal(await getSqliteQuotaStore().consume('k', dim, 1), 1)
  fs.rmSync(dataDir, { recursive: true, force: true })
  assert.equal(await getSqliteQuotaStore().consume('k', dim, 1), 1)
  assert.ok(fs.existsSync(dbPath), 'reopened through the resolver')
  assert.ok(!fs.existsSync(path.join(process.env.DATA_DIR, 'storage.sqlite')), 'not at the default path')
})

test('the folder replaced by a file (cannot be recreated): fail open with one warning per operation, typed errors, recovery once it can be', async () => {
  const { dataDir } = freshDb()
  const p = poolWithPlan('blocked-dir', 100)
  await recordConsumption({ ...p.request, cost: {} })

  fs.rmSync(dataDir, { recursive: true, force: true })
  fs.writeFileSync(dataDir, 'not a folder')
  for (let i = 0; i < 3; i++) {
    const [decision, ms] = await timed(() => enforceQuotaShare(p.request))
    assert.deepEqual(decision, { kind: 'allow' })
    assert.ok(ms < 1000, `enforce took ${ms} ms`)
  }
  for (let i = 0; i < 3; i++) await recordConsumption({ ...p.request, cost: {} })
  assert.equal(enforceWarnings().length, 2, `one for enforce, one for record: ${JSON.stringify(warnings)}`)
  await assert.rejects(getSqliteQuotaStore().consume('k', { poolId: 'x', unit: 'requests', window: 'hourly' }, 1), (err) => {
    assert.equal(err.code, 'ERR_QUOTA_STORE')
    assert.match(err.message, /creating the folder/)
    return true
  })

  fs.rmSync(dataDir)
  assert.deepEqual(await enforceQuotaShare(p.request), { kind: 'allow' })
  await recordConsumption({ ...p.request, cost: {} })
  assert.equal(flushQuotaWrites(), null)
  assert.deepEqual(
    infos.filter((i) => i.component === 'quota:enforce').map((i) => [i.msg, i.failedCalls]).sort(),
    [['quota enforce recovered', 3], ['quota record recovered', 3]],
  )
  assert.equal(enforceWarnings().length, 2)
})

test('the disk full (a 512 KiB tmpfs): consume with QUOTA_RECORD_FLUSH_MS=0 rejects with ERR_QUOTA_STORE, record resolves and warns once, writes succeed once space is freed', async (t) => {
  const mount = path.join(root, 'tmpfs')
  fs.mkdirSync(mount)
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=512k', 'tmpfs', mount], { stdio: 'pipe' })
  } catch (err) {
    t.skip(`cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): ${String(err.stderr || err.message).trim()}`)
    return
  }
  try {
    closeQuotaDb()
    installHost({ dbPath: path.join(mount, 'storage.sqlite'), logger })
    const p = poolWithPlan('full', 1e9)
    await recordConsumption({ ...p.request, cost: {} })
    assert.equal(flushQuotaWrites(), null) // committed before the disk fills
    // consume commits before it resolves only with QUOTA_RECORD_FLUSH_MS=0 (otherwise it is
    // buffered like a record): the mode whose promise this checks.
    process.env.QUOTA_RECORD_FLUSH_MS = '0'
    const store = getSqliteQuotaStore()
    const dim = { poolId: 'full', unit: 'tokens', window: 'daily' }

    const filler = path.join(mount, 'filler')
    const fd = fs.openSync(filler, 'w')
    for (const size of [65536, 4096, 512, 1]) {
      const chunk = Buffer.alloc(size, 1)
      try {
        for (;;) fs.writeSync(fd, chunk)
      } catch (err) {
        assert.equal(err.code, 'ENOSPC')
      }
    }
    fs.closeSync(fd)

    // SQLite may still have room in its WAL; new rows need new pages before long.
    let failure = null
    let written = 0
    const started = performance.now()
    for (let i = 0; i < 5000 && !failure; i++) {
      await store.consume(`full-${i}`, dim, 1).then(
        () => written++,
        (err) => {
          failure = err
        },
      )
    }
    assert.ok(failure, 'a write failed once the disk was full')
    // Every consume that resolved committed its write (a commit that failed after the
    // RETURNING row used to resolve anyway, and the write was lost).
    const day = Math.floor(Date.now() / 86_400_000)
    for (let i = 0; i < written; i++) assert.equal(getBucket(`full-${i}`, 'full:tokens:daily', day), 1, `full-${i}`)
    assert.equal(getBucket(`full-${written}`, 'full:tokens:daily', day), 0)
    assert.equal(failure.code, 'ERR_QUOTA_STORE')
    assert.match(failure.message, /full/i)
    assert.ok(performance.now() - started < 20_000)
    delete process.env.QUOTA_RECORD_FLUSH_MS

    warnings.length = 0
    for (let i = 0; i < 3; i++) {
      const [, ms] = await timed(() => recordConsumption({ ...p.request, cost: { requests: 1 } }))
      assert.ok(ms < 1000, `record took ${ms} ms`)
      flushQuotaWrites() // the automatic flush fails: the records stay buffered
    }
    assert.equal(enforceWarnings().length, 1, JSON.stringify(warnings))
    assert.match(enforceWarnings()[0].error, /full/i)
    // Reads still work: the decision is the real one, buffered records included.
    assert.deepEqual(await enforceQuotaShare(p.request), { kind: 'allow', deprioritize: false })
    assert.equal(p.bucket(), 4)
    assert.equal(committed(path.join(mount, 'storage.sqlite'), p.request.apiKeyId, p.dimensionKey), 1, 'nothing was committed while full')

    fs.rmSync(filler)
    assert.equal(await store.consume('after-full', dim, 2), 2)
    await recordConsumption({ ...p.request, cost: {} })
    assert.equal(flushQuotaWrites(), null)
    assert.equal(committed(path.join(mount, 'storage.sqlite'), p.request.apiKeyId, p.dimensionKey), 5, 'the buffered records landed once there was room')
    assert.deepEqual(
      infos.filter((i) => i.component === 'quota:enforce').map((i) => i.msg),
      ['quota flush recovered'],
    )
  } finally {
    delete process.env.QUOTA_RECORD_FLUSH_MS
    closeQuotaDb()
    execFileSync('umount', ['-l', mount])
  }
})

test('corrupt rows: an unknown policy decides as hard, a weight of 150 reads as 100, dimensions_json that is not JSON is no plan', async () => {
  const { dbPath } = freshDb({ host: { saturationFetchers: { 'acme-corrupt': async () => 0.9 } } })
  createPool({ connectionId: 'bootstrap', name: 'bootstrap' }) // the schema
  const host = new Database(dbPath)
  host.pragma('journal_mode = WAL')
  host.pragma('busy_timeout = 2000')
  host.pragma('ignore_check_constraints = ON')
  try {
    const bucket = Math.floor(Date.now() / HOUR)
    const pool = (id, connectionId, allocations) => {
      host.prepare('INSERT INTO quota_pools (id, connection_id, name) VALUES (?, ?, ?)').run(id, connectionId, id)
      for (const [key, weight, policy] of allocations) {
        host.prepare('INSERT INTO quota_allocations (pool_id, api_key_id, weight, policy) VALUES (?, ?, ?, ?)').run(id, key, weight, policy)
      }
    }
    const plan = (connectionId, provider, json) =>
      host.prepare("INSERT OR REPLACE INTO provider_plans (connection_id, provider, dimensions_json, source) VALUES (?, ?, ?, 'manual')").run(connectionId, provider, json)

    // An unknown policy, in strict mode, over its 20 % share: it decides as hard and blocks;
    // the same use under burst passes.
    pool('p-policy', 'c-policy', [['yolo', 20, 'yolo'], ['burster', 20, 'burst'], ['other', 60, 'hard']])
    plan('c-policy', 'acme-corrupt', JSON.stringify([{ unit: 'requests', window: 'hourly', limit: 100 }]))
    incrementBucket('yolo', 'p-policy:requests:hourly', bucket, 30, Date.now())
    incrementBucket('burster', 'p-policy:requests:hourly', bucket, 30, Date.now())
    const yolo = await enforceQuotaShare({ apiKeyId: 'yolo', connectionId: 'c-policy', provider: 'acme-corrupt' })
    assert.equal(yolo.kind, 'block')
    assert.equal(yolo.reason, 'Quota share limit reached for your API key on acme-corrupt')
    assert.equal((await enforceQuotaShare({ apiKeyId: 'burster', connectionId: 'c-policy', provider: 'acme-corrupt' })).kind, 'allow')
    assert.equal(getPool('p-policy').allocations.find((a) => a.apiKeyId === 'yolo').policy, 'hard')

    // Weights outside 0..100 (and not numbers) are clamped when read: 150 → 100, −5 → 0, 'abc' → 0.
    pool('p-weight', 'c-weight', [['heavy', 150, 'hard'], ['negative', -5, 'hard'], ['text', 'abc', 'hard']])
    assert.deepEqual(
      getPool('p-weight').allocations.map((a) => [a.apiKeyId, a.weight]).sort(),
      [['heavy', 100], ['negative', 0], ['text', 0]],
    )
    const usage = await getSqliteQuotaStore().poolUsageWithDimensions('p-weight', [{ unit: 'requests', window: 'hourly', limit: 100 }])
    assert.deepEqual(usage.dimensions[0].perKey.map((k) => [k.apiKeyId, k.fairShare]).sort(), [['heavy', 100], ['negative', 0], ['text', 0]])
    plan('c-weight', 'acme-corrupt', JSON.stringify([{ unit: 'requests', window: 'hourly', limit: 100 }]))
    incrementBucket('heavy', 'p-weight:requests:hourly', bucket, 99, Date.now())
    assert.deepEqual(await enforceQuotaShare({ apiKeyId: 'heavy', connectionId: 'c-weight', provider: 'acme-corrupt' }), { kind: 'allow', deprioritize: false })
    incrementBucket('heavy', 'p-weight:requests:hourly', bucket, 1, Date.now())
    assert.equal((await enforceQuotaShare({ apiKeyId: 'heavy', connectionId: 'c-weight', provider: 'acme-corrupt' })).kind, 'block')

    // dimensions_json that is not JSON: no stored plan, so the catalog's (kimi: 1500 requests/hour).
    pool('p-json', 'c-json', [['json', 100, 'hard']])
    plan('c-json', 'kimi', '{not json')
    assert.deepEqual(resolvePlan('c-json', 'kimi'), { connectionId: null, provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1500 }], source: 'auto' })
    incrementBucket('json', 'p-json:requests:hourly', bucket, 1499, Date.now())
    assert.equal((await enforceQuotaShare({ apiKeyId: 'json', connectionId: 'c-json', provider: 'kimi' })).kind, 'allow')
    // A partly valid list keeps its valid entries: limit 5, so 1499 blocks.
    plan('c-json', 'kimi', '[{"unit":"requests","window":"hourly","limit":5},{"unit":"bogus"},7,null]')
    assert.deepEqual(resolvePlan('c-json', 'kimi').dimensions, [{ unit: 'requests', window: 'hourly', limit: 5 }])
    assert.equal((await enforceQuotaShare({ apiKeyId: 'json', connectionId: 'c-json', provider: 'kimi' })).kind, 'block')
    assert.equal(enforceWarnings().length, 0, 'corrupt rows are decisions, not faults')
  } finally {
    host.close()
  }
})

test('a file whose schema cannot be made (another quota_consumption): tried again once a second, not on every call', async () => {
  const { dataDir, dbPath } = freshDb()
  fs.mkdirSync(dataDir, { recursive: true })
  const other = new Database(dbPath)
  other.pragma('journal_mode = WAL')
  other.exec('CREATE TABLE quota_consumption (x TEXT)')
  other.close()
  const native = require('../binding.js')
  const before = native.__opensForTests()
  const request = { apiKeyId: 'k-schema', connectionId: 'c-schema', provider: 'p-schema' }
  const started = performance.now()
  for (let i = 0; i < 200; i++) {
    assert.deepEqual(await enforceQuotaShare(request), { kind: 'allow' })
    await recordConsumption({ ...request, cost: {} })
  }
  const ms = performance.now() - started
  const opens = native.__opensForTests() - before
  assert.ok(opens >= 1 && opens <= 2 + Math.ceil(ms / 1000), `${opens} opens in ${ms.toFixed(0)} ms for 200 requests`)
  assert.equal(enforceWarnings().length, 2, 'one for enforce, one for record')
})

/** Takes write access to `file` away (root writes any file whatever its mode: made immutable) or gives it back. */
function setWritable(file, writable) {
  if (process.getuid?.() === 0) execFileSync('chattr', [writable ? '-i' : '+i', file])
  else fs.chmodSync(file, writable ? 0o644 : 0o444)
}

// Records made while no connection can be opened are not counted (the pool they belong to is
// in the file), as with the other faults that keep the file from opening.
test('a file the server may only read: refused with a warning saying so, and counting again at once when it may write', async () => {
  const { dbPath } = freshDb()
  const p = poolWithPlan('read-only', 100)
  await enforceQuotaShare(p.request) // a fault of an earlier test's, if any, recovers here
  await recordConsumption({ ...p.request, cost: {} })
  closeQuotaDb()
  warnings.length = 0
  setWritable(dbPath, false)
  try {
    for (let i = 0; i < 3; i++) {
      assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
      await recordConsumption({ ...p.request, cost: {} })
    }
    assert.equal(enforceWarnings().length, 2, JSON.stringify(warnings))
    for (const warning of enforceWarnings()) assert.match(warning.error, /may not write/, JSON.stringify(warning))
  } finally {
    setWritable(dbPath, true)
  }
  assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
  await recordConsumption({ ...p.request, cost: {} })
  assert.equal(flushQuotaWrites(), null)
  assert.equal(committed(dbPath, p.request.apiKeyId, p.dimensionKey), 2)
})
