// Every way the host may install and call the engine, on the host fixture (bench/host.mjs):
// enforce and record p50/p99 inside the calls, and record commits per second, one process
// per variant. `node scripts/with-hooks.js bench/host-options.mjs [--requests N]`
// (run by `npm run bench`).
//
// Per request, one per event-loop turn: enforce → the host's call-log insert → record.
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'
import fs from 'node:fs'
import { summarize } from './measure.mjs'
import { startHost } from './host.mjs'

const here = fileURLToPath(import.meta.url)
const VARIANTS = {
  'dbPath: () => file (the host), CommonJS entries': { dbPath: 'function' },
  'dbPath: file (a string)': { dbPath: 'string' },
  'no dbPath ($DATA_DIR)': { dbPath: 'none' },
  'dbPath: () => file, ESM entries': { dbPath: 'function', esm: true },
  'dbPath: () => file, then installHost({ logger }) again': { dbPath: 'function', again: true },
  'dbPath: () => file, QUOTA_RECORD_FLUSH_MS=0': { dbPath: 'function', env: { QUOTA_RECORD_FLUSH_MS: '0' } },
  'dbPath: () => file, the calls on a worker thread': { dbPath: 'function', worker: true },
}

/** Runs `n` requests with `enforce`/`record` and the host's insert; p50/p99 per call. */
async function run(n, enforce, record, logCall, metrics) {
  const commits = () => Number(/^quota_engine_record_commits_total (\d+)$/m.exec(metrics())?.[1])
  const turn = () => new Promise((resolve) => setImmediate(resolve))
  const keys = Array.from({ length: 8 }, (_, i) => `opt-key-${i}`)
  const e = new Float64Array(n)
  const r = new Float64Array(n)
  const warmup = 1000
  let before = 0
  let t0 = 0n
  for (let i = -warmup; i < n; i++) {
    if (i === 0) {
      before = commits()
      t0 = process.hrtime.bigint()
    }
    const request = { apiKeyId: keys[(i + warmup) % 8], connectionId: 'opt-conn', provider: 'opt' }
    let t = process.hrtime.bigint()
    if ((await enforce(request)).kind !== 'allow') throw new Error('blocked')
    if (i >= 0) e[i] = Number(process.hrtime.bigint() - t)
    logCall(request.apiKeyId)
    t = process.hrtime.bigint()
    await record({ apiKeyId: request.apiKeyId, connectionId: 'opt-conn', provider: 'opt', model: 'gpt-x', cost: { tokens: 1200, usd: 0.002, requests: 1 } })
    if (i >= 0) r[i] = Number(process.hrtime.bigint() - t)
    await turn()
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  return { enforce: summarize(e, n, 1n), record: summarize(r, n, 1n), commitsPerSec: (commits() - before) / seconds, requestsPerSec: n / seconds }
}

async function child(name, n) {
  const variant = VARIANTS[name]
  const host = startHost({ dbPath: variant.dbPath })
  const require = createRequire(import.meta.url)
  const engine = require('@omniroute/quota-engine')
  engine.upsertProviderPlan({ connectionId: 'opt-conn', provider: 'opt', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1e9 }, { unit: 'tokens', window: 'hourly', limit: 1e12 }], source: 'manual' })
  engine.createPool({ connectionId: 'opt-conn', name: 'options', allocations: Array.from({ length: 8 }, (_, i) => ({ apiKeyId: `opt-key-${i}`, weight: 12.5, policy: 'hard' })) })
  if (variant.again) require('@omniroute/quota-engine/compat/host').installHost({ logger: { warn() {}, info() {}, debug() {} } })
  let result
  if (variant.worker) {
    const worker = new Worker(here, { workerData: { n } })
    result = await new Promise((resolve, reject) => worker.once('message', resolve).once('error', reject))
    await worker.terminate()
  } else {
    const entries = variant.esm ? await import('@omniroute/quota-engine/compat/enforce') : require('@omniroute/quota-engine/compat/enforce')
    result = await run(n, entries.enforceQuotaShare, entries.recordConsumption, host.logCall, engine.metrics)
  }
  host.stop()
  fs.rmSync(host.dir, { recursive: true, force: true })
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`)
}

if (!isMainThread) {
  // The calls on a worker: its own entries, the process's database; the host's insert on
  // the worker's own connection (as a host module loaded there would have it).
  const require = createRequire(import.meta.url)
  const { enforceQuotaShare, recordConsumption } = require('@omniroute/quota-engine/compat/enforce')
  const engine = require('@omniroute/quota-engine')
  const Database = require('better-sqlite3')
  const db = new Database(`${process.env.DATA_DIR}/storage.sqlite`)
  db.pragma('busy_timeout = 2000')
  const insert = db.prepare("INSERT INTO call_logs (id, timestamp, api_key_id) VALUES (?, datetime('now'), ?)")
  let seq = 0
  const result = await run(workerData.n, enforceQuotaShare, recordConsumption, (key) => insert.run(`w-${++seq}`, key), engine.metrics)
  db.close()
  parentPort.postMessage(result)
} else if (process.argv[2] === '--child') {
  await child(process.argv[3], Number(process.argv[4]))
} else {
  const i = process.argv.indexOf('--requests')
  const n = i > 0 ? Number(process.argv[i + 1]) : 10_000
  const f1 = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1))
  console.log(`\nThe host's options on the host fixture — ${n} requests, one per turn, enforce → the host's insert → record; µs inside each call\n`)
  console.log('| how the host installs and calls it | enforce p50 / p99 | record p50 / p99 | record commits/s | requests/s |')
  console.log('|---|---:|---:|---:|---:|')
  for (const [name, variant] of Object.entries(VARIANTS)) {
    const out = spawnSync(process.execPath, [here, '--child', name, String(n)], { encoding: 'utf8', env: { ...process.env, ...variant.env } })
    const line = /^RESULT (.*)$/m.exec(out.stdout)
    if (!line) throw new Error(`${name}: ${out.stderr}`)
    const x = JSON.parse(line[1])
    console.log(`| ${name} | ${f1(x.enforce.p50)} / ${f1(x.enforce.p99)} | ${f1(x.record.p50)} / ${f1(x.record.p99)} | ${x.commitsPerSec.toFixed(0)} | ${Math.round(x.requestsPerSec)} |`)
  }
}
