// Durability of buffered SQLite records, stated in time (docs/reliability.md, "Durability
// of records"): records and `consume`s commit together at most every
// QUOTA_RECORD_FLUSH_MS (group commit by time, not per event-loop turn), by a timer that
// never keeps the process alive; a SIGKILL loses only what is younger than the window
// (+ the stated margin: one event-loop turn and one commit); SIGTERM, SIGINT and SIGHUP
// lose nothing and still end the process as they would have (or leave it to the host's
// own handler).
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import fs from 'node:fs'
import { spawn, spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { makeDataDir, openHost, loadEngine } from './support/store-env.mjs'

const require = createRequire(import.meta.url)
const dataDir = makeDataDir('durable')
const dbFile = path.join(dataDir, 'storage.sqlite')
const childScript = fileURLToPath(new URL('./support/durability-worker.mjs', import.meta.url))
const engine = loadEngine()
const { recordConsumption, flushQuotaWrites, createPool, upsertProviderPlan, closeQuotaDb, metrics } = engine
/** The default window, and the margin the promise states on top of it. */
const FLUSH_MS = 10
const MARGIN_MS = 50
const nextTurn = () => new Promise((resolve) => setImmediate(resolve))
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const clock = () => performance.timeOrigin + performance.now()

after(() => {
  closeQuotaDb()
  fs.rmSync(dataDir, { recursive: true, force: true })
})

let seq = 0
function pool() {
  const tag = `d${++seq}`
  const request = { apiKeyId: `key-${tag}`, connectionId: `conn-${tag}`, provider: `acme-${tag}` }
  const created = createPool({ connectionId: request.connectionId, name: tag, allocations: [{ apiKeyId: request.apiKeyId, weight: 100, policy: 'hard' }] })
  upsertProviderPlan({ connectionId: request.connectionId, provider: request.provider, dimensions: [{ unit: 'requests', window: 'hourly', limit: 1e12 }], source: 'manual' })
  flushQuotaWrites()
  return { request, requestsKey: `${created.id}:requests:hourly`, consumePool: `consume-${tag}` }
}

/** What the host's own connection sees committed. */
function committed(apiKeyId, dimensionKey) {
  const host = openHost(dbFile)
  try {
    const row = host.prepare('SELECT sum(consumed) AS s FROM quota_consumption WHERE api_key_id = ? AND dimension_key = ?').get(apiKeyId, dimensionKey)
    return row.s ?? 0
  } finally {
    host.close()
  }
}

function commits() {
  return Number(/^quota_engine_record_commits_total (\d+)$/m.exec(metrics())[1])
}

test('records of requests made one per event-loop turn commit together by time, not one commit per turn', async () => {
  const p = pool()
  process.env.QUOTA_RECORD_FLUSH_MS = '60000'
  try {
    const before = commits()
    for (let i = 0; i < 100; i++) {
      await recordConsumption({ ...p.request, cost: { requests: 1 } })
      await nextTurn()
    }
    assert.equal(commits() - before, 0, 'no commit within the window')
    assert.equal(committed(p.request.apiKeyId, p.requestsKey), 0)
    assert.equal(flushQuotaWrites(), null)
    assert.equal(commits() - before, 1, 'one commit for the 100 requests')
    assert.equal(committed(p.request.apiKeyId, p.requestsKey), 100)
  } finally {
    delete process.env.QUOTA_RECORD_FLUSH_MS
  }
  // The default 10 ms: at most one commit per window, however many turns.
  const before = commits()
  const started = performance.now()
  for (let i = 0; i < 300; i++) {
    await recordConsumption({ ...p.request, cost: { requests: 1 } })
    await nextTurn()
  }
  const windows = (performance.now() - started) / FLUSH_MS
  const made = commits() - before
  assert.ok(made <= Math.ceil(windows) + 1, `${made} commits in ${windows.toFixed(1)} windows`)
  // The timer commits the rest without another call.
  while (committed(p.request.apiKeyId, p.requestsKey) < 400) await sleep(5)
  assert.equal(committed(p.request.apiKeyId, p.requestsKey), 400)
})

test('the window is the setting: a record waits for QUOTA_RECORD_FLUSH_MS, then the timer commits it', async () => {
  const p = pool()
  process.env.QUOTA_RECORD_FLUSH_MS = '300'
  try {
    const started = performance.now()
    await recordConsumption({ ...p.request, cost: { requests: 1 } })
    await sleep(60)
    // Far inside the window (a loaded machine only makes this later, never earlier).
    assert.equal(committed(p.request.apiKeyId, p.requestsKey), 0, 'committed before its window')
    while (committed(p.request.apiKeyId, p.requestsKey) === 0) await sleep(5)
    const age = performance.now() - started
    assert.ok(age >= 300, `committed after ${age.toFixed(0)} ms, inside the 300 ms window`)
    assert.ok(age < 300 + 1000, `committed ${age.toFixed(0)} ms after the record`)
  } finally {
    delete process.env.QUOTA_RECORD_FLUSH_MS
  }
})

test('SqliteQuotaStore.consume goes through the same buffer: it answers the new total at once and commits by time', async () => {
  const store = engine.getSqliteQuotaStore()
  const dim = { poolId: 'consume-buffered', unit: 'requests', window: 'daily' }
  const key = 'consume-buffered:requests:daily'
  process.env.QUOTA_RECORD_FLUSH_MS = '60000'
  try {
    const before = commits()
    for (let i = 1; i <= 50; i++) assert.equal(await store.consume('c', dim, 2), 2 * i)
    assert.equal(await store.peek('c', dim), 100)
    assert.equal(committed('c', key), 0, 'buffered')
    assert.equal(commits() - before, 0)
    assert.equal(flushQuotaWrites(), null)
    assert.equal(committed('c', key), 100)
    assert.equal(await store.consume('c', dim, 1), 101)
    await assert.rejects(store.consume('c', dim, -1), { name: 'RangeError', code: 'ERR_QUOTA_INVALID_ARG' })
    assert.equal(await store.peek('c', dim), 101, 'a bad cost writes nothing')
    process.env.QUOTA_RECORD_FLUSH_MS = '0'
    assert.equal(await store.consume('c', dim, 1), 102)
    assert.equal(committed('c', key), 102, 'QUOTA_RECORD_FLUSH_MS=0 commits in the call, with what was buffered')
  } finally {
    delete process.env.QUOTA_RECORD_FLUSH_MS
  }
})

function start(rate, env = {}, option) {
  const p = pool()
  const logFile = path.join(dataDir, `log-${seq}.txt`)
  const args = [childScript, dataDir, logFile, rate, p.request.apiKeyId, p.request.connectionId, p.request.provider, p.consumePool]
  if (option) args.push(option)
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } })
  let out = ''
  let err = ''
  child.stderr.on('data', (b) => { err += b })
  const ready = new Promise((resolve) => child.stdout.on('data', (b) => {
    out += b
    if (out.includes('READY')) resolve()
  }))
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, out: () => out, err: () => err })))
  return { p, logFile, child, ready, exited }
}

/** After the child died: requests it resolved, what is committed, and the age of the oldest lost one at the kill. */
function outcome(run, killedAt) {
  const times = fs.readFileSync(run.logFile, 'utf8').split('\n').filter((l) => /^\d+ [\d.]+$/.test(l)).map((l) => Number(l.split(' ')[1]))
  closeQuotaDb() // the next read reopens: recovery of whatever the killed process left in the WAL
  const records = committed(run.p.request.apiKeyId, run.p.requestsKey)
  const consumes = committed(run.p.request.apiKeyId, `${run.p.consumePool}:requests:daily`)
  const lostRecords = Math.max(0, times.length - records)
  const lostConsumes = Math.max(0, times.length - consumes)
  const oldest = Math.min(records, consumes)
  return {
    resolved: times.length,
    records,
    consumes,
    lostRecords,
    lostConsumes,
    // Request n+1 (0-based index n) is the oldest one not fully committed.
    oldestLostAgeMs: oldest < times.length ? killedAt - times[oldest] : 0,
  }
}

async function killAfterReady(run, signal, delayMs) {
  await run.ready
  await sleep(delayMs)
  const killedAt = clock()
  run.child.kill(signal)
  const exit = await run.exited
  return { exit, killedAt }
}

for (const rate of ['turn', 'saturate']) {
  test(`SIGKILL at ${rate === 'turn' ? 'one request per event-loop turn' : 'saturation'}: only records younger than ${FLUSH_MS} ms (+ ${MARGIN_MS} ms margin) are lost`, async () => {
    for (const delay of [7, 23, 41]) {
      const run = start(rate)
      const { exit, killedAt } = await killAfterReady(run, 'SIGKILL', delay)
      assert.equal(exit.signal, 'SIGKILL', exit.err())
      const o = outcome(run, killedAt)
      assert.ok(o.resolved >= 200, JSON.stringify(o))
      assert.ok(o.records <= o.resolved + 1 && o.consumes <= o.resolved + 1, JSON.stringify(o))
      assert.ok(o.oldestLostAgeMs <= FLUSH_MS + MARGIN_MS, `lost a request ${o.oldestLostAgeMs.toFixed(1)} ms old: ${JSON.stringify(o)}`)
    }
  })
}

for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
  test(`${signal} with no handler of the host's: nothing is lost, and the process still dies by ${signal}`, async () => {
    const run = start('turn', { QUOTA_RECORD_FLUSH_MS: '60000' }) // nothing would commit by time
    const { exit, killedAt } = await killAfterReady(run, signal, 15)
    assert.equal(exit.signal, signal, exit.err())
    const o = outcome(run, killedAt)
    assert.equal(o.lostRecords, 0, JSON.stringify(o))
    assert.equal(o.lostConsumes, 0, JSON.stringify(o))
  })
}

test("SIGTERM with the host's own handler: the records are committed and the host's handler decides (the process is not killed)", async () => {
  const run = start('turn', { QUOTA_RECORD_FLUSH_MS: '60000' }, 'host-handler')
  const { exit, killedAt } = await killAfterReady(run, 'SIGTERM', 15)
  assert.equal(exit.signal, null, exit.err())
  assert.equal(exit.code, 0, exit.err())
  assert.match(exit.out(), /HOST-HANDLED/)
  const o = outcome(run, killedAt)
  assert.equal(o.lostRecords, 0, JSON.stringify(o))
  assert.equal(o.lostConsumes, 0, JSON.stringify(o))
})

test('the flush timer does not keep a process alive: a child that records once and has nothing else to do exits, its record committed', { timeout: 30_000 }, () => {
  const p = pool()
  const entry = require.resolve('@omniroute/quota-engine')
  const source = `
    const { recordConsumption } = require(${JSON.stringify(entry)})
    recordConsumption(${JSON.stringify({ ...p.request, cost: { requests: 1 } })})
  `
  // A 60 s window: a timer that held the event loop would hold the child for a minute.
  const r = spawnSync(process.execPath, ['-e', source], { env: { ...process.env, QUOTA_RECORD_FLUSH_MS: '60000' }, encoding: 'utf8', timeout: 20_000 })
  assert.equal(r.signal, null, 'the child had to be killed: something kept it alive')
  assert.equal(r.status, 0, r.stderr)
  assert.equal(committed(p.request.apiKeyId, p.requestsKey), 1)
})

