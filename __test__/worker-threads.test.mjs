// Counters stay exact across threads: four worker_threads of one process load the addon
// (one engine connection per process, shared by every thread behind a mutex) and consume
// on one key while the main thread does too.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { SHARE_ENV, Worker } from 'node:worker_threads'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

test('4 worker threads × 2 500 consumes and 2 500 on the main thread give exactly 12 500', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-threads-'))
  process.env.DATA_DIR = dataDir
  const engine = require('@omniroute/quota-engine')
  const store = engine.getSqliteQuotaStore()
  const dim = { poolId: 'threads', unit: 'requests', window: 'daily' }
  await store.peek('warm', dim)
  const source = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { getSqliteQuotaStore } = require(workerData.entry)
    const store = getSqliteQuotaStore()
    ;(async () => {
      let last = 0
      for (let i = 0; i < workerData.count; i++) last = await store.consume('shared', workerData.dim, 1)
      parentPort.postMessage(last)
    })().catch((err) => parentPort.postMessage({ error: String(err && err.stack) }))
  `
  const entry = require.resolve('@omniroute/quota-engine')
  const workers = Array.from({ length: 4 }, () => new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData: { entry, dim, count: 2500 } })
    worker.once('message', (value) => (value && value.error ? reject(new Error(value.error)) : resolve(value)))
    worker.once('error', reject)
  }))
  for (let i = 0; i < 2500; i++) await store.consume('shared', dim, 1)
  const lasts = await Promise.all(workers)
  assert.equal(await store.peek('shared', dim), 12500)
  // Every thread saw its own last increment: no two were merged.
  assert.equal(new Set(lasts).size, 4)
  engine.closeQuotaDb()
  fs.rmSync(dataDir, { recursive: true, force: true })
})

test('a worker that never called installHost uses the database and configuration the process installed', async () => {
  const engine = require('@omniroute/quota-engine')
  const installed = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-installed-'))
  const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-elsewhere-'))
  const dbPath = path.join(installed, 'storage.sqlite')
  const saved = { DATA_DIR: process.env.DATA_DIR, factor: process.env.QUOTA_SOFT_DEPRIORITIZE_FACTOR }
  // DATA_DIR names another folder: a worker falling back to it would write there.
  process.env.DATA_DIR = elsewhere
  process.env.QUOTA_SOFT_DEPRIORITIZE_FACTOR = '0.25'
  engine.closeQuotaDb()
  for (const dbPathOption of [dbPath, () => dbPath]) {
    engine.installHost({ dbPath: dbPathOption })
    engine.closeQuotaDb()
    const source = `
      const { parentPort, workerData } = require('node:worker_threads')
      const engine = require(workerData.entry)
      engine.closeQuotaDb() // the worker opens the database itself
      engine.incrementBucket('worker-key', 'workers:requests:daily', 7, 3, Date.now())
      parentPort.postMessage({ factor: engine.softPenaltyFactor() })
    `
    const entry = require.resolve('@omniroute/quota-engine')
    const answer = await new Promise((resolve, reject) => {
      const worker = new Worker(source, { eval: true, workerData: { entry } })
      worker.once('message', resolve)
      worker.once('error', reject)
    })
    assert.equal(answer.factor, 0.25)
    assert.equal(engine.getBucket('worker-key', 'workers:requests:daily', 7), 3 * (typeof dbPathOption === 'string' ? 1 : 2))
    assert.ok(fs.existsSync(dbPath))
    assert.ok(!fs.existsSync(path.join(elsewhere, 'storage.sqlite')), 'nothing written under DATA_DIR')
  }
  engine.closeQuotaDb()
  engine.installHost({})
  if (saved.DATA_DIR === undefined) delete process.env.DATA_DIR
  else process.env.DATA_DIR = saved.DATA_DIR
  if (saved.factor === undefined) delete process.env.QUOTA_SOFT_DEPRIORITIZE_FACTOR
  else process.env.QUOTA_SOFT_DEPRIORITIZE_FACTOR = saved.factor
  for (const dir of [installed, elsewhere]) fs.rmSync(dir, { recursive: true, force: true })
})

test("log records go to the logger of the thread that installed the host, not to a worker's stderr", async () => {
  const engine = require('@omniroute/quota-engine')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-worker-logs-'))
  const got = []
  const logger = { warn: (_, msg) => got.push(msg), info() {}, debug() {}, error() {} }
  engine.installHost({ dbPath: path.join(dir, 'storage.sqlite'), logger })
  const entry = JSON.stringify(require.resolve('@omniroute/quota-engine'))
  const saved = process.env.QUOTA_SCHEDULER_MAX_IDS
  // A bad setting is warned about once per value, when a new scheduler name is interned (a
  // record made on the calling thread); the scheduler's calls hand no records over,
  // enforceQuotaShare's do.
  const badSetting = (value) =>
    `process.env.QUOTA_SCHEDULER_MAX_IDS = '${value}'
    engine.selectQuotaShareTarget([{ executionKey: '${value}', connectionId: 'c' }], 'logs', 'm').decrementInflight();`
  const handOver = `engine.enforceQuotaShare({ apiKeyId: 'k', connectionId: 'c', provider: 'p' }).then(() => process.exit(0));`
  /** A worker (sharing the environment variables) running `body` with `engine`. */
  const onWorker = (body) => {
    const worker = new Worker(`const engine = require(${entry}); ${body}`, { eval: true, stdout: true, stderr: true, env: SHARE_ENV })
    const output = { stdout: '', stderr: '' }
    worker.stdout.on('data', (chunk) => (output.stdout += chunk))
    worker.stderr.on('data', (chunk) => (output.stderr += chunk))
    const ended = new Promise((resolve, reject) => {
      worker.once('error', reject)
      worker.once('exit', () => resolve(output))
    })
    return { worker, ended }
  }
  try {
    // Made on the host's thread, handed over first by a worker without a host of its own.
    new Function('engine', badSetting('made-on-the-host-thread'))(engine)
    const outputs = [await onWorker(handOver).ended]
    // Made on a worker without a host of its own.
    outputs.push(await onWorker(badSetting('made-on-a-worker') + handOver).ended)
    // A worker with a host of its own keeps its own records; the others' still go to the
    // first host's logger, while that worker is there and after it has ended.
    const own = onWorker(`engine.installHost({ logger: { warn: (_, msg) => console.log(msg) } })
      ${badSetting('made-on-a-host-worker')}
      require('node:worker_threads').parentPort.once('message', () => { ${handOver} }).postMessage('made')`)
    await new Promise((resolve) => own.worker.once('message', resolve))
    outputs.push(await onWorker(badSetting('made-beside-a-host-worker') + handOver).ended)
    own.worker.postMessage('go')
    const ownOutput = await own.ended
    assert.match(ownOutput.stdout, /made-on-a-host-worker/)
    outputs.push(await onWorker(badSetting('made-after-a-host-worker-ended') + handOver).ended)
    for (const { stdout, stderr } of [...outputs, ownOutput]) {
      assert.doesNotMatch(stderr, /QUOTA_SCHEDULER_MAX_IDS/)
      assert.doesNotMatch(stdout, /made-(on-the|on-a-worker|beside|after)/)
    }
    await engine.enforceQuotaShare({ apiKeyId: 'k', connectionId: 'c', provider: 'p' })
    const made = ['on-the-host-thread', 'on-a-worker', 'beside-a-host-worker', 'after-a-host-worker-ended']
    assert.deepEqual(
      got.filter((msg) => msg.startsWith('QUOTA_SCHEDULER_MAX_IDS=')).map((msg) => msg.split('"')[1]),
      made.map((where) => `made-${where}`),
    )
  } finally {
    if (saved === undefined) delete process.env.QUOTA_SCHEDULER_MAX_IDS
    else process.env.QUOTA_SCHEDULER_MAX_IDS = saved
    engine.closeQuotaDb()
    engine.installHost({})
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
