// Decisions across the host's commits (docs/sqlite.md#decisions-that-survive-unrelated-commits):
// a commit to another table — the host's call log, through its own better-sqlite3 in this
// process — leaves the engine deciding from memory (tests/store_hot.rs counts the lock
// calls); these tests hold the other half: whatever changes the engine's tables, between
// any number of unrelated commits, in this process or another, is seen by the very next
// decision, and the counters stay exact.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { makeDataDir, openHost, loadEngine } from './support/store-env.mjs'

const dataDir = makeDataDir('hostc')
const dbFile = path.join(dataDir, 'storage.sqlite')
const worker = fileURLToPath(new URL('./support/consume-worker.mjs', import.meta.url))
const qe = loadEngine()
const store = qe.getSqliteQuotaStore()
const turn = () => new Promise((resolve) => setImmediate(resolve))

after(() => qe.closeQuotaDb())

/** A pool of one hard key on its own connection, a daily request limit, and the host's table. */
async function setup(name, limit) {
  const connectionId = `${name}-conn`
  qe.upsertProviderPlan({ connectionId, provider: 'acme', dimensions: [{ unit: 'requests', window: 'daily', limit }], source: 'manual' })
  const pool = qe.createPool({ connectionId, name, allocations: [{ apiKeyId: `${name}-key`, weight: 100, policy: 'hard' }] })
  const host = openHost(dbFile)
  host.exec('CREATE TABLE IF NOT EXISTS host_call_logs (id INTEGER PRIMARY KEY, at INTEGER, body TEXT)')
  const insert = host.prepare('INSERT INTO host_call_logs (at, body) VALUES (?, ?)')
  const req = { apiKeyId: `${name}-key`, connectionId, provider: 'acme' }
  const dim = { poolId: pool.id, unit: 'requests', window: 'daily' }
  // Warm: the cache is filled, then every later decision starts from it.
  assert.equal((await qe.enforceQuotaShare(req)).kind, 'allow')
  assert.equal((await qe.enforceQuotaShare(req)).kind, 'allow')
  return { host, log: () => insert.run(Date.now(), 'x'.repeat(300)), req, dim, pool }
}

test('host rows between requests: every record counts at once, the host writing the counter too, and the limit holds exactly', async () => {
  const { host, log, req, dim } = await setup('hc-mix', 30)
  const bucket = Math.floor(Date.now() / qe.WINDOW_MS.daily)
  const hostAdd = host.prepare(
    `INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (api_key_id, dimension_key, bucket_index) DO UPDATE SET consumed = consumed + excluded.consumed`,
  )
  try {
    let expected = 0
    let blocked = 0
    for (let i = 0; i < 60; i++) {
      log()
      if (i % 7 === 3) {
        // The host's old code (or another process) adds to the same counter.
        hostAdd.run(req.apiKeyId, `${dim.poolId}:requests:daily`, bucket, 2, Date.now())
        expected += 2
        log()
      }
      assert.equal(await store.peek(req.apiKeyId, dim), expected, `request ${i}: the counter before deciding`)
      const decision = await qe.enforceQuotaShare(req)
      if (decision.kind === 'allow') {
        assert.ok(expected < 30, `request ${i} allowed at ${expected} of 30`)
        await qe.recordConsumption({ ...req, cost: { requests: 1 } })
        expected += 1
      } else {
        assert.ok(expected >= 30 - 1, `request ${i} blocked at ${expected} of 30`)
        blocked++
      }
      log()
      await turn() // the record buffer commits here: the engine's own commit, then the host's next row
    }
    assert.ok(blocked > 0)
    assert.equal(qe.flushQuotaWrites(), null)
    assert.equal(host.prepare('SELECT consumed FROM quota_consumption WHERE api_key_id = ?').pluck().get(req.apiKeyId), expected)
    assert.equal(await store.peek(req.apiKeyId, dim), expected)
  } finally {
    host.close()
  }
})

function runWorker(args) {
  const child = spawn(process.execPath, [worker, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  let err = ''
  child.stderr.on('data', (b) => { err += b })
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, err })))
}

test("another process's commits to the counters are seen by the next decision, after host rows", async () => {
  const { host, log, req, dim } = await setup('hc-proc', 10)
  try {
    for (let i = 0; i < 20; i++) {
      log()
      assert.equal((await qe.enforceQuotaShare(req)).kind, 'allow')
    }
    // Another process, its own engine: 10 consumes of this key, each its own commit.
    const r = await runWorker([dataDir, '10', req.apiKeyId, dim.poolId])
    assert.equal(r.code, 0, r.err)
    log()
    log()
    const decision = await qe.enforceQuotaShare(req)
    assert.equal(decision.kind, 'block', JSON.stringify(decision))
    assert.equal(await store.peek(req.apiKeyId, dim), 10)
    // The host clears the counter (its reset): seen as well.
    host.prepare('DELETE FROM quota_consumption WHERE api_key_id = ?').run(req.apiKeyId)
    log()
    assert.equal((await qe.enforceQuotaShare(req)).kind, 'allow')
    assert.equal(await store.peek(req.apiKeyId, dim), 0)
  } finally {
    host.close()
  }
})

test('a plan the host changes between its rows is seen by the next decision', async () => {
  const { host, log, req } = await setup('hc-plan', 1000)
  try {
    for (let i = 0; i < 5; i++) {
      log()
      assert.equal((await qe.enforceQuotaShare(req)).kind, 'allow')
    }
    await qe.recordConsumption({ ...req, cost: { requests: 5 } })
    await turn()
    log()
    host
      .prepare('UPDATE provider_plans SET dimensions_json = ? WHERE connection_id = ?')
      .run(JSON.stringify([{ unit: 'requests', window: 'daily', limit: 5 }]), req.connectionId)
    log()
    assert.equal((await qe.enforceQuotaShare(req)).kind, 'block')
  } finally {
    host.close()
  }
})
