// How long a request waits for the host's saturation fetcher (issue 15 item 2): a provider
// usage API simulated with a fixed latency, and one that never answers. Measures one
// enforceQuotaShare on a cold cache (no value yet), on an expired one (a value fetched
// 31 s ago), and how many fetcher calls 100 concurrent cold requests make. Not a timed
// test: it prints a markdown table.
//
//   npm run bench:saturation [-- --latency-ms MS --runs R]
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const engine = require('../index.js')
const native = require('../binding.js')

const argv = process.argv.slice(2)
const arg = (name, fallback) => {
  const i = argv.indexOf(name)
  return i >= 0 ? Number(argv[i + 1]) : fallback
}
const LATENCY_MS = arg('--latency-ms', 120)
const RUNS = arg('--runs', 5)
// A request that waits longer than this is reported as "> cap" (a fetcher that never
// answers made it wait forever before the fix).
const CAP_MS = 3_000

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-saturation-wait-'))
const logger = { warn() {}, info() {}, debug() {} }
let calls = 0
const fetchers = {
  slow: async () => {
    calls++
    await new Promise((resolve) => setTimeout(resolve, LATENCY_MS))
    return 0.2
  },
  hung: () => {
    calls++
    return new Promise(() => {})
  },
}
engine.installHost({ dbPath: path.join(dir, 'storage.sqlite'), logger, saturationFetchers: fetchers })

let seq = 0
function pool(provider) {
  const connectionId = `sat-${provider}-${++seq}`
  engine.createPool({ connectionId, name: connectionId, allocations: [{ apiKeyId: 'k', weight: 100, policy: 'hard' }] })
  engine.upsertProviderPlan({ connectionId, provider, dimensions: [{ unit: 'requests', window: 'hourly', limit: 1000 }], source: 'manual' })
  return { apiKeyId: 'k', connectionId, provider }
}

/** Milliseconds one enforce takes, or Infinity past CAP_MS. */
async function timed(request) {
  const start = process.hrtime.bigint()
  let timer
  const capped = new Promise((resolve) => { timer = setTimeout(resolve, CAP_MS, 'capped') })
  const answer = await Promise.race([engine.enforceQuotaShare(request), capped])
  clearTimeout(timer)
  return answer === 'capped' ? Infinity : Number(process.hrtime.bigint() - start) / 1e6
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1]
const show = (ms) => (ms === Infinity ? `> ${CAP_MS} (never answers)` : ms.toFixed(ms < 1 ? 3 : 1))

const rows = []
for (const provider of ['slow', 'hung']) {
  const cold = []
  const expired = []
  for (let r = 0; r < RUNS; r++) {
    const request = pool(provider)
    cold.push(await timed(request))
    const other = pool(provider)
    native.putSaturation(provider, other.connectionId, 'requests', 'hourly', 0.2, Date.now() - 31_000)
    expired.push(await timed(other))
    await new Promise((resolve) => setTimeout(resolve, provider === 'slow' ? LATENCY_MS + 20 : 0))
  }
  rows.push([provider === 'slow' ? `answers in ${LATENCY_MS} ms` : 'never answers', show(median(cold)), show(median(expired))])
}
calls = 0
const crowd = pool('slow')
await Promise.all(Array.from({ length: 100 }, () => engine.enforceQuotaShare(crowd)))
console.log(`| fetcher | cold cache: request waits (ms, median of ${RUNS}) | expired entry: request waits (ms) |`)
console.log('|---|---:|---:|')
for (const row of rows) console.log(`| ${row.join(' | ')} |`)
console.log(`\n100 concurrent cold requests on one connection: ${calls} fetcher call(s)`)
engine.closeQuotaDb()
fs.rmSync(dir, { recursive: true, force: true })
process.exit(0)
