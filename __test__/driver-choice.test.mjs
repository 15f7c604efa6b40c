// The driver choice under stress: records made while the choice keeps being restarted all
// land (the engine awaits the choice and records on the driver it settled on), and resets
// racing choices on another thread never leave the engine without a driver.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Worker } from 'node:worker_threads'
import { createRequire } from 'node:module'
import { REDIS_SKIP, startRedis } from './support/redis-server.mjs'

const require = createRequire(import.meta.url)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-choice-'))
const engine = require('@omniroute/quota-engine')
const native = require('../binding.js')
const logger = { warn() {}, info() {}, debug() {} }
engine.installHost({ dbPath: path.join(dir, 'storage.sqlite'), logger })

let seq = 0
function pool() {
  const c = `choice-conn-${++seq}`
  const key = `choice-key-${seq}`
  const created = engine.createPool({ connectionId: c, name: c, allocations: [{ apiKeyId: key, weight: 100, policy: 'hard' }] })
  engine.upsertProviderPlan({ connectionId: c, provider: 'openai', dimensions: [{ unit: 'requests', window: 'daily', limit: 1e6 }], source: 'manual' })
  return { request: { apiKeyId: key, connectionId: c, provider: 'openai' }, dim: { poolId: created.id, unit: 'requests', window: 'daily' } }
}

function restoreEnv() {
  delete process.env.QUOTA_STORE_DRIVER
  delete process.env.QUOTA_STORE_REDIS_URL
  delete process.env.QUOTA_STORE_REDIS_TIMEOUT_MS
  engine.resetQuotaStoreSingleton()
}

after(() => {
  restoreEnv()
  engine.closeQuotaDb()
  fs.rmSync(dir, { recursive: true, force: true })
})

test('records made while the choice keeps restarting all land', { skip: REDIS_SKIP, timeout: 30_000 }, async () => {
  const server = await startRedis()
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = server.url
  process.env.QUOTA_STORE_REDIS_TIMEOUT_MS = '150'
  const p = pool()
  process.kill(server.pid, 'SIGSTOP') // Redis stalls: every PING waits for the timeout
  const resets = setInterval(() => engine.resetQuotaStoreSingleton(), 50)
  try {
    for (let i = 0; i < 10; i++) await engine.recordConsumption({ ...p.request, cost: { requests: 1 } })
  } finally {
    clearInterval(resets)
    process.kill(server.pid, 'SIGCONT')
    restoreEnv()
    await server.stop()
  }
  // Redis never answered: every record went to SQLite, none was dropped.
  assert.equal(await engine.getSqliteQuotaStore().peek(p.request.apiKeyId, p.dim), 10)
})

test('resets racing choices on another thread never leave the engine without a driver', { skip: REDIS_SKIP, timeout: 60_000 }, async () => {
  const server = await startRedis()
  process.env.QUOTA_STORE_DRIVER = 'redis'
  process.env.QUOTA_STORE_REDIS_URL = server.url
  const flag = new Int32Array(new SharedArrayBuffer(8))
  const worker = new Worker(
    `
    const { workerData: flag } = require('node:worker_threads')
    const native = require(${JSON.stringify(require.resolve('../binding.js'))})
    for (;;) {
      Atomics.wait(flag, 0, 0)
      if (Atomics.load(flag, 1) === 1) break
      while (Atomics.load(flag, 0) === 1) native.resetStoreChoice()
      Atomics.store(flag, 0, 0)
    }
  `,
    { eval: true, workerData: flag },
  )
  try {
    const started = Date.now()
    let rounds = 0
    while (Date.now() - started < 4000) {
      rounds++
      Atomics.store(flag, 0, 1)
      Atomics.notify(flag, 0)
      const choices = []
      const t = performance.now()
      while (performance.now() - t < 5) choices.push(native.chooseStore())
      Atomics.store(flag, 0, 2) // the storm stops
      while (Atomics.load(flag, 0) !== 0) {}
      await Promise.all(choices.map((c) => Promise.resolve(c)))
      const store = await engine.getQuotaStore()
      assert.ok(native.chosenStoreNow(), `round ${rounds}: no driver after getQuotaStore() resolved`)
      assert.equal(engine.getQuotaStoreSync(), store)
    }
    assert.ok(rounds > 20, `only ${rounds} rounds`)
  } finally {
    Atomics.store(flag, 1, 1)
    Atomics.store(flag, 0, 1)
    Atomics.notify(flag, 0)
    await worker.terminate()
    restoreEnv()
    await server.stop()
  }
})
