// The engine as the host installs it (bench/host.mjs): `dbPath` a function that answers
// `undefined` until the host's database module has loaded, the host's pragmas, its schema
// created first, a call-log row committed per request. What the host's form of the options
// must cost: the same commits as a string path (records are committed by time, never one
// commit per record), counted by the engine's own metric, not timed.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import { startHost } from '../bench/host.mjs'

const require = createRequire(import.meta.url)
const host = startHost({ dbPath: 'function', checkpointMs: 50 })
const engine = require('@omniroute/quota-engine')
const { enforceQuotaShare, recordConsumption } = require('@omniroute/quota-engine/compat/enforce')
const commits = () => Number(/^quota_engine_record_commits_total (\d+)$/m.exec(engine.metrics())[1])
const turn = () => new Promise((resolve) => setImmediate(resolve))

after(() => {
  host.stop()
  fs.rmSync(host.dir, { recursive: true, force: true })
})

const connectionId = 'fixture-conn'
const provider = 'fixture-provider'
const keys = ['fk-0', 'fk-1', 'fk-2']
engine.upsertProviderPlan({ connectionId, provider, dimensions: [{ unit: 'requests', window: 'hourly', limit: 1e9 }], source: 'manual' })
const pool = engine.createPool({ connectionId, name: 'fixture', allocations: keys.map((apiKeyId) => ({ apiKeyId, weight: 33, policy: 'hard' })) })
const counted = () => host.db.prepare('SELECT coalesce(sum(consumed), 0) AS n FROM quota_consumption WHERE dimension_key = ?').get(`${pool.id}:requests:hourly`).n

test('the engine opens the host file through the path function, on the host schema', async () => {
  assert.equal((await enforceQuotaShare({ apiKeyId: keys[0], connectionId, provider })).kind, 'allow')
  assert.equal(engine.flushQuotaWrites(), null)
  assert.ok(fs.existsSync(host.file))
  const tables = host.db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE type = 'table'").get().n
  assert.ok(tables >= 120, `the host's schema has ${tables} tables`)
  assert.equal(host.db.prepare("SELECT count(*) AS n FROM quota_pools WHERE id = ?").get(pool.id).n, 1, 'the pool is in the host file')
})

test('records within one turn share one commit with a path function, as with a string', async () => {
  const before = commits()
  const start = counted()
  for (let i = 0; i < 200; i++) await recordConsumption({ apiKeyId: keys[i % 3], connectionId, provider, cost: { requests: 1 } })
  // Still inside one turn: nothing was due, so nothing committed (each record was its own
  // write transaction before the path function's check stopped committing).
  assert.ok(commits() - before <= 1, `${commits() - before} commits for 200 records in one turn`)
  assert.equal(engine.flushQuotaWrites(), null)
  assert.equal(counted() - start, 200)
})

test('one request per turn on the host path: commits stay within 1000 / QUOTA_RECORD_FLUSH_MS a second', async () => {
  const before = commits()
  const start = counted()
  const t0 = process.hrtime.bigint()
  const n = 3000
  for (let i = 0; i < n; i++) {
    const request = { apiKeyId: keys[i % 3], connectionId, provider }
    assert.equal((await enforceQuotaShare(request)).kind, 'allow')
    host.logCall(request.apiKeyId, connectionId, provider)
    await recordConsumption({ ...request, cost: { requests: 1 } })
    await turn()
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  const made = commits() - before
  // 10 ms by default: at most 100 a second, plus the last one.
  assert.ok(made <= Math.ceil(seconds * 100) + 2, `${made} commits in ${seconds.toFixed(2)} s for ${n} requests`)
  assert.equal(engine.flushQuotaWrites(), null)
  assert.equal(counted() - start, n, 'every record counted, as the host reads the table')
})

test('one file check per request on the host path: the decision makes it, the record none', async () => {
  const native = require('../binding.js')
  const checks = () => native.__fileChecksForTests()
  // Within one turn no flush timer runs, so every check counted is a request's own, or the
  // store setting's re-read (once a second).
  const n = 100
  const t0 = Date.now()
  const setting = () => 1 + Math.floor((Date.now() - t0) / 1000)
  const before = checks()
  for (let i = 0; i < n; i++) {
    const request = { apiKeyId: keys[i % 3], connectionId, provider }
    assert.equal((await enforceQuotaShare(request)).kind, 'allow')
    host.logCall(request.apiKeyId, connectionId, provider)
    await recordConsumption({ ...request, cost: { requests: 1 } })
  }
  const made = checks() - before
  assert.ok(made >= n && made <= n + setting(), `${made} checks for ${n} requests: one (an fstat) per decision, none per record`)
  const recordsFrom = checks()
  for (let i = 0; i < n; i++) await recordConsumption({ apiKeyId: keys[i % 3], connectionId, provider, cost: { requests: 1 } })
  assert.ok(checks() - recordsFrom <= setting(), `${checks() - recordsFrom} checks for ${n} records, which only add to the buffer`)
  assert.equal(engine.flushQuotaWrites(), null)
})

// An operator's restore without the host's reset: a copy renamed over the file while the
// host's connection stays on the old one, whose -wal and -shm are still at the path. The
// engine does not attach the new file to them (the host's next commit would land in the
// WAL both then read): until the host lets go of the old file (its close, a restart) a flush
// fails, saying why, and nothing reaches the new file; then what was buffered for the old
// file is counted in it: every buffered record, and of those to be committed in their own
// call the first (it noticed the rename after its pool was matched on the old file; the
// others found no file to match theirs against, and are not counted, as in a restore).
for (const [made, flushMs, apiKeyId, counted] of [['buffered', undefined, keys[0], 5], ['committed in their own call', '0', keys[1], 1]]) {
  test(`a file renamed over the host file while the host keeps the old one open: records ${made} then`, async () => {
    const Database = require('better-sqlite3')
    const request = { apiKeyId, connectionId, provider }
    assert.equal((await enforceQuotaShare(request)).kind, 'allow')
    assert.equal(engine.flushQuotaWrites(), null)
    host.db.pragma('wal_checkpoint(TRUNCATE)')
    const copy = `${host.file}.copy`
    fs.copyFileSync(host.file, copy)
    fs.renameSync(copy, host.file)
    const inCopy = () => {
      const reader = new Database(host.file, { readonly: true })
      try {
        return reader.prepare('SELECT coalesce(sum(consumed), 0) AS n FROM quota_consumption WHERE dimension_key = ?').get(`${pool.id}:requests:hourly`).n
      } finally {
        reader.close()
      }
    }
    if (flushMs !== undefined) process.env.QUOTA_RECORD_FLUSH_MS = flushMs
    try {
      const start = inCopy()
      for (let i = 0; i < 5; i++) await recordConsumption({ ...request, cost: { requests: 1 } })
      assert.match(String(engine.flushQuotaWrites()), /whose -wal and -shm a connection/)
      assert.equal(inCopy() - start, 0, 'nothing in the new file while the host is on the old one')
      host.close()
      host.open()
      assert.equal(engine.flushQuotaWrites(), null)
      assert.equal(inCopy() - start, counted)
    } finally {
      delete process.env.QUOTA_RECORD_FLUSH_MS
    }
  })
}
