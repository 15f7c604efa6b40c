// The host's restore while worker threads use the engine on the same file
// (docs/sqlite.md#the-file-at-rest): a worker's call may land in any gap of the restore
// (the file unlinked, the sidecars unlinked, the copy begun), or open the file just before
// it is unlinked. However it lands, the backup comes back whole (the host's own tables
// there), the file stays sound, the lock hook stays on, and the engine counts once the
// restore is done. A race test: it fails only when a race is hit, and its 150 restores hit
// each of the ones it guards against many times over in the runs that found them.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'
import { startHost } from '../bench/host.mjs'

const require = createRequire(import.meta.url)
const Database = require('better-sqlite3')
const engine = require('@omniroute/quota-engine')
const { enforceQuotaShare, recordConsumption } = require('@omniroute/quota-engine/compat/enforce')
const host = startHost({ checkpointMs: 0 })
after(() => {
  host.stop()
  fs.rmSync(host.dir, { recursive: true, force: true })
})

const RESTORES = 150
const WORKER = `
  const { parentPort, workerData } = require('node:worker_threads')
  const engine = require(workerData.entry)
  const logs = []
  const log = (fields, msg) => logs.push(msg + ' ' + JSON.stringify(fields))
  engine.installHost({ dbPath: workerData.file, logger: { warn: log, error: log, info() {}, debug() {} } })
  const stop = new Int32Array(workerData.stop)
  ;(async () => {
    let calls = 0
    while (Atomics.load(stop, 0) === 0) {
      await engine.enforceQuotaShare(workerData.request)
      await engine.recordConsumption({ ...workerData.request, cost: { requests: 1 } })
      if (++calls % 100 === 0) await new Promise((resolve) => setImmediate(resolve))
    }
    engine.flushQuotaWrites()
    parentPort.postMessage({ calls, logs })
  })()
`

let seq = 0
function pool(limit) {
  const tag = `rw-${++seq}`
  const request = { apiKeyId: `${tag}-key`, connectionId: `${tag}-conn`, provider: tag }
  engine.upsertProviderPlan({ connectionId: request.connectionId, provider: tag, dimensions: [{ unit: 'requests', window: 'daily', limit }], source: 'manual' })
  const { id } = engine.createPool({ connectionId: request.connectionId, name: tag, allocations: [{ apiKeyId: request.apiKeyId, weight: 100, policy: 'hard' }] })
  return { request, dimensionKey: `${id}:requests:daily` }
}

const gap = () => (Math.random() < 0.4 ? new Promise((resolve) => setImmediate(resolve)) : new Promise((resolve) => setTimeout(resolve, Math.random() * 3)))
const consumed = (db, p) =>
  db.prepare('SELECT coalesce(sum(consumed), 0) AS n FROM quota_consumption WHERE api_key_id = ? AND dimension_key = ?').get(p.request.apiKeyId, p.dimensionKey).n

test(`${RESTORES} restores while 2 worker threads enforce and record: the backup comes back whole every time, and counts after`, async () => {
  const busy = [pool(1e12), pool(1e12)]
  const last = pool(10)
  host.logCall(last.request.apiKeyId)
  assert.equal(engine.flushQuotaWrites(), null)
  const backup = path.join(host.dir, 'backup.sqlite')
  await host.backup(backup)
  const hostRows = host.db.prepare('SELECT count(*) AS n FROM call_logs').get().n

  const stop = new SharedArrayBuffer(4)
  const entry = require.resolve('@omniroute/quota-engine')
  const workers = busy.map(({ request }) => new Worker(WORKER, { eval: true, workerData: { entry, file: host.file, request, stop } }))
  const reports = workers.map((worker) => new Promise((resolve, reject) => worker.once('message', resolve).once('error', reject)))
  await new Promise((resolve) => setTimeout(resolve, 200))

  const lost = []
  for (let i = 0; i < RESTORES; i++) {
    // restoreDbBackup(), with the gaps its awaits leave.
    host.close()
    await gap()
    for (const suffix of ['', '-wal', '-shm', '-journal']) {
      fs.rmSync(host.file + suffix, { force: true })
      await gap()
    }
    fs.copyFileSync(backup, host.file)
    host.open()
    try {
      const rows = host.db.prepare('SELECT count(*) AS n FROM call_logs').get().n
      if (rows !== hostRows) lost.push(`restore ${i}: ${rows} rows`)
    } catch (err) {
      lost.push(`restore ${i}: ${err.message}`)
    }
    host.logCall(last.request.apiKeyId)
    await gap()
  }
  Atomics.store(new Int32Array(stop), 0, 1)
  const done = await Promise.all(reports)
  await Promise.all(workers.map((worker) => worker.terminate()))

  assert.deepEqual(lost, [], "the host's rows after each restore")
  assert.equal(host.db.pragma('integrity_check', { simple: true }), 'ok')
  const said = [...host.logs.map((l) => `${l.msg} ${JSON.stringify(l.fields)}`), ...done.flatMap((d) => d.logs)]
  assert.deepEqual(said.filter((line) => /self-test|refuses every further lock/.test(line)), [], 'the lock hook stays on')
  assert.ok(done.every((d) => d.calls > RESTORES), JSON.stringify(done.map((d) => d.calls)))

  // After the last restore the engine counts again: 10 recorded of 10, then a block.
  const before = consumed(host.db, last)
  assert.equal((await enforceQuotaShare(last.request)).kind, 'allow')
  await recordConsumption({ ...last.request, cost: { requests: 10 } })
  assert.equal(engine.flushQuotaWrites(), null)
  assert.equal(consumed(host.db, last), before + 10)
  assert.equal((await enforceQuotaShare(last.request)).kind, 'block')
  engine.closeQuotaDb()
  const reader = new Database(host.file, { readonly: true })
  try {
    assert.equal(reader.pragma('integrity_check', { simple: true }), 'ok')
    assert.equal(consumed(reader, last), before + 10)
  } finally {
    reader.close()
  }
})
