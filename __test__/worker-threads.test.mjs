// Counters stay exact across threads: four worker_threads of one process load the addon
// (one engine connection per process, shared by every thread behind a mutex) and consume
// on one key while the main thread does too.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Worker } from 'node:worker_threads'
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
