// npm run bench:durability — what a kill loses of the buffered SQLite records
// (docs/reliability.md, "Durability of records").
//
//   node scripts/with-hooks.js bench/durability.mjs [--kills N]
//
// A child (__test__/support/durability-worker.mjs) makes requests — recordConsumption and
// SqliteQuotaStore.consume each, awaited, a log line per resolved request — one per
// event-loop turn ("realistic") or back to back without yielding ("saturation"); it is
// killed at a random moment (20–220 ms after its first 200 requests). After each kill the
// committed counters are read from the file and compared with the log: how many resolved
// requests were lost, and how old the oldest lost one was at the kill.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'

const require = createRequire(import.meta.url)
const Database = require('better-sqlite3')
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}
const KILLS = arg('--kills', 10)
const childScript = fileURLToPath(new URL('../__test__/support/durability-worker.mjs', import.meta.url))
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'quota-durability-'))
process.env.DATA_DIR = tmp
const engine = require('@omniroute/quota-engine')
const clock = () => performance.timeOrigin + performance.now()
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

let seq = 0
async function once(rate, signal, env = {}) {
  const tag = `k${++seq}`
  const request = { apiKeyId: `key-${tag}`, connectionId: `conn-${tag}`, provider: `acme-${tag}` }
  const pool = engine.createPool({ connectionId: request.connectionId, name: tag, allocations: [{ apiKeyId: request.apiKeyId, weight: 100, policy: 'hard' }] })
  engine.upsertProviderPlan({ connectionId: request.connectionId, provider: request.provider, dimensions: [{ unit: 'requests', window: 'hourly', limit: 1e12 }], source: 'manual' })
  engine.flushQuotaWrites()
  const logFile = path.join(tmp, `${tag}.log`)
  const child = spawn(process.execPath, [childScript, tmp, logFile, rate, request.apiKeyId, request.connectionId, request.provider, `consume-${tag}`], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...env } })
  await new Promise((resolve) => {
    let out = ''
    child.stdout.on('data', (b) => {
      out += b
      if (out.includes('READY')) resolve()
    })
  })
  await sleep(20 + Math.random() * 200)
  const killedAt = clock()
  const exited = new Promise((resolve) => child.on('exit', resolve))
  child.kill(signal)
  await exited
  engine.closeQuotaDb()
  const times = fs.readFileSync(logFile, 'utf8').split('\n').filter((l) => /^\d+ [\d.]+$/.test(l)).map((l) => Number(l.split(' ')[1]))
  const db = new Database(path.join(tmp, 'storage.sqlite'))
  const sum = (key) => db.prepare('SELECT sum(consumed) AS s FROM quota_consumption WHERE api_key_id = ? AND dimension_key = ?').get(request.apiKeyId, key).s ?? 0
  const records = sum(`${pool.id}:requests:hourly`)
  const consumes = sum(`consume-${tag}:requests:daily`)
  db.close()
  const committed = Math.min(records, consumes)
  const lost = Math.max(0, times.length - committed)
  const span = (times[times.length - 1] - times[0]) / 1000
  return { lost, oldestMs: lost > 0 ? killedAt - times[committed] : 0, rate: (times.length - 1) / span }
}

const rows = []
try {
  for (const [name, rate, signal, env] of [
    ['one request per event-loop turn', 'turn', 'SIGKILL'],
    ['saturation (never yields)', 'saturate', 'SIGKILL'],
    ['one request per event-loop turn', 'turn', 'SIGTERM'],
    ['one request per turn, QUOTA_RECORD_FLUSH_MS=0', 'turn', 'SIGKILL', { QUOTA_RECORD_FLUSH_MS: '0' }],
  ]) {
    const runs = []
    for (let i = 0; i < KILLS; i++) runs.push(await once(rate, signal, env))
    rows.push({ name, signal, runs })
    process.stderr.write(`  ${name}, ${signal} done\n`)
  }
  const f1 = (x) => x.toFixed(1)
  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length
  console.log(`\nDurability of buffered records — ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'}, QUOTA_RECORD_FLUSH_MS=10 unless said, ${KILLS} kills per row\n`)
  console.log('| rate | signal | requests/s | lost per kill: mean / max | oldest lost, ms: mean / max |')
  console.log('|---|---|---:|---:|---:|')
  for (const { name, signal, runs } of rows) {
    const lost = runs.map((r) => r.lost)
    const oldest = runs.map((r) => r.oldestMs)
    console.log(`| ${name} | ${signal} | ${Math.round(mean(runs.map((r) => r.rate))).toLocaleString('en-US')} | ${f1(mean(lost))} / ${Math.max(...lost)} | ${f1(mean(oldest))} / ${f1(Math.max(...oldest))} |`)
  }
} finally {
  engine.closeQuotaDb()
  fs.rmSync(tmp, { recursive: true, force: true })
}
