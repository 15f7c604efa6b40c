// Concurrency and durability of the SQLite counters: many promises, many processes,
// a SIGKILLed writer, and the host's close → rm -rf DATA_DIR → recreate cycle.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import fs from 'node:fs'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { makeDataDir, openHost, loadEngine } from './support/store-env.mjs'

const dataDir = makeDataDir('conc')
const dbFile = path.join(dataDir, 'storage.sqlite')
const worker = fileURLToPath(new URL('./support/consume-worker.mjs', import.meta.url))
const qe = loadEngine()
const { getSqliteQuotaStore, closeQuotaDb, WINDOW_MS } = qe
const store = getSqliteQuotaStore()
const reqDaily = (poolId) => ({ poolId, unit: 'requests', window: 'daily' })

after(() => closeQuotaDb())

function runWorker(args, onLine, env = {}) {
  const child = spawn(process.execPath, [worker, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } })
  let out = ''
  let err = ''
  child.stderr.on('data', (b) => { err += b })
  child.stdout.on('data', (b) => {
    out += b
    if (onLine) for (const line of out.split('\n').slice(0, -1)) onLine(line, child)
  })
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, out, err })))
}

test('4 processes × 10 000 consumes on one file give exactly 40 000', async () => {
  await store.peek('warm', reqDaily('mp-pool')) // file and schema exist before the children start
  const runs = await Promise.all([0, 1, 2, 3].map(() => runWorker([dataDir, '10000', 'shared', 'mp-pool'])))
  for (const r of runs) assert.equal(r.code, 0, r.err)
  assert.equal(await store.peek('shared', reqDaily('mp-pool')), 40000)
  const bucket = Math.floor(Date.now() / WINDOW_MS.daily)
  assert.equal(qe.getBucket('shared', 'mp-pool:requests:daily', bucket), 40000)
})

// consume is buffered like the records and committed by time (its loss bound under SIGKILL
// is in durability.test.mjs); QUOTA_RECORD_FLUSH_MS=0 commits each one before it resolves.
test('with QUOTA_RECORD_FLUSH_MS=0, a writer killed with SIGKILL after N resolved consumes leaves exactly N', async () => {
  const N = 300
  let seen = null
  const r = await runWorker([dataDir, String(N), 'killed', 'kill-pool', 'hold'], (line, child) => {
    if (seen === null && line.startsWith('DONE ')) {
      seen = Number(line.slice(5))
      child.kill('SIGKILL')
    }
  }, { QUOTA_RECORD_FLUSH_MS: '0' })
  assert.equal(r.signal, 'SIGKILL', r.err)
  assert.equal(seen, N)
  closeQuotaDb() // reopen: recovery of whatever the killed process left in the WAL
  assert.equal(await store.peek('killed', reqDaily('kill-pool')), N)
  const check = openHost(dbFile)
  try {
    assert.equal(check.pragma('integrity_check', { simple: true }), 'ok')
  } finally { check.close() }
})

test('reset cycle: close host and engine, rm -rf DATA_DIR, recreate → fresh file, old data gone', async () => {
  const d = reqDaily('reset-pool')
  await store.consume('r', d, 42)
  qe.createPool({ connectionId: 'rc', name: 'before-reset' })
  const host = openHost(dbFile)
  assert.equal(host.prepare("SELECT sum(consumed) AS s FROM quota_consumption WHERE api_key_id='r'").get().s, 42)
  host.close()
  closeQuotaDb()
  fs.rmSync(dataDir, { recursive: true, force: true })
  fs.mkdirSync(dataDir)
  assert.equal(await store.peek('r', d), 0)
  assert.equal(await store.consume('r', d, 1), 1)
  assert.equal(qe.listPools({}).total, 0)
  assert.ok(fs.existsSync(dbFile), 'the engine recreated storage.sqlite in the new folder')
  const host2 = openHost(dbFile)
  try {
    assert.equal(host2.prepare("SELECT sum(consumed) AS s FROM quota_consumption WHERE api_key_id='r'").get().s, 1)
    // fresh file: importLegacyPools imports now, and a second call is a no-op
    // A createdAt with an offset is stored as toISOString() writes it.
    const legacy = [{ id: 'legacy-a', connectionId: 'lc', name: 'legacy', createdAt: '2024-01-01T12:00:00+02:00', allocations: [{ apiKeyId: 'l1', weight: 50, policy: 'hard' }] }]
    qe.importLegacyPools(legacy)
    assert.equal(host2.prepare('SELECT count(*) AS n FROM quota_pools').get().n, 1)
    assert.equal(qe.getPool('legacy-a').createdAt, '2024-01-01T10:00:00.000Z')
    qe.importLegacyPools([...legacy, { id: 'legacy-b', connectionId: 'lc2', name: 'legacy2', allocations: [] }])
    assert.equal(host2.prepare('SELECT count(*) AS n FROM quota_pools').get().n, 1)
    assert.equal(host2.prepare('SELECT count(*) AS n FROM quota_allocations').get().n, 1)
  } finally { host2.close() }
})
