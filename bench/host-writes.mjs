// npm run bench:host-writes — the hot path as the host calls it: one request per event-loop
// turn (setImmediate between requests), and the host committing an unrelated row (its call
// log) through its own better-sqlite3 connection on the same storage.sqlite, per request.
//
//   node bench/host-writes.mjs [--ops N]
//
// Rows, 8 keys × 2 dimensions, each request timed piece by piece with
// process.hrtime.bigint:
// - "host insert + enforce": the host's insert, then enforceQuotaShare — what a commit to
//   another table costs the next decision (docs/sqlite.md#decisions-that-survive-unrelated-commits);
// - "host insert + enforce + record": the whole request; the record buffer commits on the
//   next turn, between requests (outside the figures) — and that commit, to the engine's
//   own tables, still means a full read for the next decision;
// - "enforce + record, host writes nothing": the reference.
// The engine's cost per request is enforce + record; the host's insert is shown apart.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}
const OPS = arg('--ops', 20_000)
const WARMUP = 2_000

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'quota-bench-host-'))
process.env.DATA_DIR = tmp // before the first engine call
const require = createRequire(import.meta.url)
const engine = require('@omniroute/quota-engine')
const Database = require('better-sqlite3')

const hr = () => process.hrtime.bigint()
const turn = () => new Promise((resolve) => setImmediate(resolve))
const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] / 1e3

try {
  const connectionId = 'bench-conn'
  const provider = 'bench-provider'
  const dimensions = [
    { unit: 'requests', window: 'hourly', limit: 1e9 },
    { unit: 'tokens', window: 'hourly', limit: 1e12 },
  ]
  const keys = Array.from({ length: 8 }, (_, i) => `hot-key-${i}`)
  engine.upsertProviderPlan({ connectionId, provider, dimensions, source: 'manual' })
  engine.createPool({
    connectionId,
    name: 'bench host writes',
    allocations: keys.map((apiKeyId) => ({ apiKeyId, weight: 12.5, policy: 'hard' })),
  })
  const req = (i) => ({ apiKeyId: keys[i % 8], connectionId, provider })
  const rec = (i) => ({ ...req(i), cost: { tokens: 1200, usd: 0.002, requests: 1 } })

  // The host: its own connection, its own table, a row per request (like its call log).
  const host = new Database(path.join(tmp, 'storage.sqlite'))
  host.pragma('journal_mode = WAL')
  host.pragma('busy_timeout = 2000')
  host.pragma('synchronous = NORMAL')
  host.exec(`CREATE TABLE IF NOT EXISTS bench_call_logs (
    id INTEGER PRIMARY KEY, created_at INTEGER NOT NULL, api_key_id TEXT, model TEXT,
    tokens INTEGER, status INTEGER)`)
  host.exec('CREATE INDEX IF NOT EXISTS bench_call_logs_created ON bench_call_logs (created_at)')
  const insert = host.prepare('INSERT INTO bench_call_logs (created_at, api_key_id, model, tokens, status) VALUES (?, ?, ?, ?, 200)')
  const hostInsert = (i) => insert.run(Date.now(), keys[i % 8], 'bench-model', 1200)

  const first = await engine.enforceQuotaShare(req(0))
  if (first.kind !== 'allow') throw new Error(`setup: ${JSON.stringify(first)}`)

  // One row: `steps` run in order per request, one request per turn; each step's latency
  // and the engine's (every step but the host's insert) kept per request.
  async function row(name, steps) {
    for (let i = 0; i < WARMUP; i++) {
      for (const step of steps) await step.fn(i)
      await turn()
    }
    const lat = steps.map(() => new Float64Array(OPS))
    const engineLat = new Float64Array(OPS)
    for (let i = 0; i < OPS; i++) {
      let engineNs = 0
      for (let s = 0; s < steps.length; s++) {
        const t0 = hr()
        await steps[s].fn(i)
        const ns = Number(hr() - t0)
        lat[s][i] = ns
        if (!steps[s].host) engineNs += ns
      }
      engineLat[i] = engineNs
      await turn()
    }
    const summary = (a) => {
      const sorted = Float64Array.from(a).sort()
      return { p50: pct(sorted, 50), p99: pct(sorted, 99) }
    }
    return { name, engine: summary(engineLat), steps: steps.map((s, j) => ({ name: s.name, ...summary(lat[j]) })) }
  }

  const hostStep = { name: 'host insert', host: true, fn: hostInsert }
  const enforceStep = { name: 'enforce', fn: (i) => engine.enforceQuotaShare(req(i)) }
  const recordStep = { name: 'record', fn: (i) => engine.recordConsumption(rec(i)) }
  const rows = [
    await row('host insert alone (no quota)', [hostStep]),
    await row('host insert + enforce', [hostStep, enforceStep]),
    await row('host insert + enforce + record', [hostStep, enforceStep, recordStep]),
    await row('enforce + record, host writes nothing', [enforceStep, recordStep]),
  ]
  const f = (x) => x.toFixed(1).padStart(6)
  console.log(`\nper request, one per event-loop turn, ${OPS} requests, 8 keys × 2 dimensions (µs)\n`)
  console.log('| row | engine p50 | engine p99 | each step p50 / p99 |')
  console.log('|---|---|---|---|')
  for (const r of rows) {
    const steps = r.steps.map((s) => `${s.name} ${s.p50.toFixed(1)} / ${s.p99.toFixed(1)}`).join('; ')
    const engineCells = r === rows[0] ? '— | —' : `${f(r.engine.p50)} | ${f(r.engine.p99)}`
    console.log(`| ${r.name} | ${engineCells} | ${steps} |`)
  }
  host.close()
  engine.closeQuotaDb()
} finally {
  fs.rmSync(tmp, { recursive: true, force: true })
}
