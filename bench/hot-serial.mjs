// Serial enforceQuotaShare and recordConsumption alone, as bench/run.mjs sets them up (8 keys
// × 2 dims, every request allowed), printed as one JSON line of calls per second: a quick
// A/B of two builds, run alternately (docs/benchmarks.md#the-edges-helpers-in-their-own-crate-2026-12-02).
// node scripts/with-hooks.js bench/hot-serial.mjs
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const engine = require('../index.js')
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'recb-'))
engine.installHost({ dbPath: path.join(dir, 'storage.sqlite') })
const connectionId = 'bench-conn', provider = 'bench-provider'
const dimensions = [{ unit: 'requests', window: 'hourly', limit: 1e9 }, { unit: 'tokens', window: 'hourly', limit: 1e12 }]
const hotKeys = Array.from({ length: 8 }, (_, i) => `hot-key-${i}`)
engine.upsertProviderPlan({ connectionId, provider, dimensions, source: 'manual' })
engine.createPool({ connectionId, name: 'b', allocations: hotKeys.map((apiKeyId) => ({ apiKeyId, weight: 12.5, policy: 'hard' })) })
const req = (i) => ({ apiKeyId: hotKeys[i % 8], connectionId, provider })
const rec = (i) => ({ ...req(i), cost: { tokens: 1200, usd: 0.002, requests: 1 } })
const N = 100000
const out = {}
for (const [name, f] of [['enforce', (i) => engine.enforceQuotaShare(req(i))], ['record', (i) => engine.recordConsumption(rec(i))]]) {
  for (let i = 0; i < 20000; i++) await f(i)
  const t = process.hrtime.bigint()
  for (let i = 0; i < N; i++) await f(i)
  out[name] = Math.round(N / (Number(process.hrtime.bigint() - t) / 1e9))
}
engine.flushQuotaWrites(); engine.closeQuotaDb(); fs.rmSync(dir, { recursive: true, force: true })
console.log(JSON.stringify(out))
