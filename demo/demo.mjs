// npm run demo — one simulated hour of three API keys sharing one Kimi plan.
//
// alice and bob send a request every 10 s; carol bursts at 8× their rate (every 1.25 s).
// The clock is injected (enforceStep / recordStep take `nowMs`), so the hour runs in
// about a second, on a throw-away SQLite file.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

// The engine opens $DATA_DIR/storage.sqlite lazily: point it at a fresh temp dir first.
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'quota-demo-'))
process.env.DATA_DIR = dataDir

const require = createRequire(import.meta.url)
const engine = require('@omniroute/quota-engine')
const native = require('../binding.js') // injected-clock variants of the hot path

const PROVIDER = 'kimi' // catalog plan: requests / hourly / 1500
const CONNECTION = 'kimi-conn'
const THRESHOLD = 0.5 // QUOTA_SATURATION_THRESHOLD's default
const HOUR = 3_600_000
const START = 1_800 * HOUR // a bucket boundary: the hour is one clean window

const keys = [
  { id: 'alice', weight: 34, everyMs: 10_000 },
  { id: 'bob', weight: 33, everyMs: 10_000 },
  { id: 'carol', weight: 33, everyMs: 1_250 },
]

try {
  const plan = engine.resolvePlan(CONNECTION, PROVIDER)
  const dim = plan.dimensions[0]
  const limit = dim.limit
  const pool = engine.createPool({
    connectionId: CONNECTION,
    name: 'kimi team',
    allocations: keys.map((k) => ({ apiKeyId: k.id, weight: k.weight, policy: 'hard' })),
  })
  const dimKey = { poolId: pool.id, unit: dim.unit, window: dim.window }

  // The upstream saturation signal. A real host registers a fetcher that asks the
  // provider how much of the account's window is used; here the account serves only
  // this pool, so the upstream's answer is the pool's own total / limit. Declaring the
  // provider as "has a fetcher" makes enforceStep answer `fetch` on a cache miss; we
  // answer with putSaturation at the simulated time (cached 30 s, like the real path).
  native.setSaturationFetcherProviders([PROVIDER])
  let fetches = 0
  const upstreamSaturation = (now) => native.storePoolConsumedTotal(dimKey, now) / limit

  const stats = new Map(keys.map((k) => [k.id, { attempted: 0, admitted: 0, blocked: {}, firstBlockMs: null }]))
  let strictSinceMs = null

  // Every request of the hour, in time order.
  const events = []
  for (const k of keys) for (let t = 0; t < HOUR; t += k.everyMs) events.push([t, k.id])
  events.sort((a, b) => a[0] - b[0] || a[1].localeCompare(b[1]))

  const started = process.hrtime.bigint()
  for (const [t, id] of events) {
    const now = START + t
    const s = stats.get(id)
    s.attempted++
    let step = native.enforceStep(id, CONNECTION, PROVIDER, undefined, THRESHOLD, now)
    if (step.kind === 'fetch') {
      fetches++
      for (const [unit, window] of step.fetch) {
        const value = native.putSaturation(PROVIDER, CONNECTION, unit, window, upstreamSaturation(now), now)
        if (strictSinceMs === null && value >= THRESHOLD) strictSinceMs = t
      }
      step = native.enforceStep(id, CONNECTION, PROVIDER, undefined, THRESHOLD, now)
    }
    if (step.kind === 'allow') {
      s.admitted++
      const err = native.recordStep(id, CONNECTION, PROVIDER, undefined, 800, 0.001, 1, now)
      if (err) throw new Error(`recordStep: ${err}`)
    } else if (step.kind === 'block') {
      s.blocked[step.code] = (s.blocked[step.code] || 0) + 1
      if (s.firstBlockMs === null) s.firstBlockMs = t
    } else {
      throw new Error(`unexpected enforce step: ${JSON.stringify(step)}`)
    }
  }
  const elapsedMs = Number(process.hrtime.bigint() - started) / 1e6

  const end = START + HOUR - 1
  const poolUsed = native.storePoolConsumedTotal(dimKey, end)
  const mmss = (ms) => `${String(Math.floor(ms / 60_000)).padStart(2, '0')}:${String(Math.floor(ms / 1000) % 60).padStart(2, '0')}`

  console.log(`Pool "${pool.name}" on ${PROVIDER}: ${limit} ${dim.unit} per ${dim.window}, 3 keys, policy hard`)
  console.log(`Simulated 1 h (${events.length} attempts) in ${elapsedMs.toFixed(0)} ms of wall time.\n`)
  console.log(
    `Mode: saturation threshold ${THRESHOLD} (the default), fed by a simulated upstream signal (pool used / ${limit}, ` +
      `cached 30 s, ${fetches} fetches). Below ${THRESHOLD * 100}% used the engine is GENEROUS: any key may borrow idle ` +
      `capacity up to the pool ceiling. From ${THRESHOLD * 100}% on it is STRICT: each hard key is held to weight × limit` +
      (strictSinceMs === null ? ' (never reached here).' : `, here from minute ${mmss(strictSinceMs)}.`),
  )
  console.log('(With no upstream signal at all the saturation reads 0 and the pool would stay generous until its ceiling.)\n')

  const rows = keys.map((k) => {
    const s = stats.get(k.id)
    const used = native.storePeek(k.id, dimKey, end)
    const blocked = Object.entries(s.blocked).map(([c, n]) => `${n} ${c}`).join(', ') || '0'
    return [
      k.id,
      `1 / ${k.everyMs / 1000} s`,
      `${k.weight}% = ${(k.weight / 100 * limit).toFixed(0)}`,
      s.attempted,
      s.admitted,
      blocked,
      s.firstBlockMs === null ? '—' : mmss(s.firstBlockMs),
      `${((used / limit) * 100).toFixed(1)}%`,
    ]
  })
  const header = ['key', 'rate', 'fair share', 'attempted', 'admitted', 'blocked (by code)', 'first block', 'pool share used']
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)))
  const line = (r) => r.map((c, i) => String(c).padEnd(widths[i])).join('  ')
  console.log(line(header))
  console.log(widths.map((w) => '-'.repeat(w)).join('  '))
  for (const r of rows) console.log(line(r))
  console.log(`\npool used: ${poolUsed.toFixed(0)} / ${limit} (${((poolUsed / limit) * 100).toFixed(1)}%)`)

  // Without the engine: first come, first served against the upstream's 1500 cap.
  let fcfsUsed = 0
  const fcfs = new Map(keys.map((k) => [k.id, 0]))
  for (const [, id] of events) if (fcfsUsed < limit) { fcfsUsed++; fcfs.set(id, fcfs.get(id) + 1) }
  const politeOk = keys.filter((k) => k.id !== 'carol').every((k) => stats.get(k.id).admitted === stats.get(k.id).attempted)
  const carol = stats.get('carol')
  console.log(
    `without the engine (first come, first served until the upstream's cap): ` +
      keys.map((k) => `${k.id} ${fcfs.get(k.id)}/${stats.get(k.id).attempted}`).join(', '),
  )
  console.log(
    `\nVerdict: ${politeOk ? 'PASS' : 'FAIL'} — alice and bob got ${politeOk ? 'every' : 'NOT every'} request they made ` +
      `(they kept their share) while carol, bursting at 8×, was capped at ${carol.admitted} ` +
      `(${((carol.admitted / limit) * 100).toFixed(1)}% of the pool) after borrowing idle capacity early in the hour.`,
  )
  process.exitCode = politeOk ? 0 : 1
} finally {
  engine.closeQuotaDb()
  fs.rmSync(dataDir, { recursive: true, force: true })
}
