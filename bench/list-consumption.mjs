// npm run bench:list [-- --rows N --runs R --share S] — listConsumptionForPool at 10⁶ rows
// (issue 15 item 9). Not a timed test: it prints the figure.
//
// Seeds N rows (default 10⁶) into quota_consumption through a host connection: S % (default
// 80) in the listed pool (4 dimension keys), the rest spread over 1 000 other pools, with
// shuffled updated_at. Then times `listConsumptionForPool(pool, limit)` for limits 500 and
// 10 (median and max of R calls, after one warm-up) — the time the event loop is blocked.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}
const ROWS = arg('--rows', 1_000_000)
const RUNS = arg('--runs', 20)
const SHARE = arg('--share', 80)

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'quota-bench-list-'))
process.env.DATA_DIR = tmp // before the first engine call
const require = createRequire(import.meta.url)
const engine = require('@omniroute/quota-engine')
const Database = require('better-sqlite3')

try {
  const store = engine.getSqliteQuotaStore()
  await store.consume('boot', { poolId: 'boot', unit: 'requests', window: 'daily' }, 1) // migrates
  const host = new Database(path.join(tmp, 'storage.sqlite'))
  host.pragma('journal_mode = WAL')
  host.pragma('busy_timeout = 5000')
  const insert = host.prepare(
    'INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?, ?, ?, ?, ?)',
  )
  const dims = ['tokens:5h', 'requests:daily', 'usd:daily', 'tokens:7d']
  const inPool = Math.floor((ROWS * SHARE) / 100)
  const t0 = Date.now()
  let seed = 1
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648
    return seed / 2147483648
  }
  host.transaction(() => {
    for (let i = 0; i < ROWS; i++) {
      const updatedAt = 1_700_000_000_000 + Math.floor(random() * 86_400_000)
      if (i < inPool) insert.run(`k${i >> 2}`, `bench:${dims[i & 3]}`, 100, 1, updatedAt)
      else insert.run(`k${i}`, `other${i % 1000}:${dims[i & 3]}`, 100, 1, updatedAt)
    }
  })()
  host.close()
  process.stderr.write(`seeded ${ROWS} rows in ${Date.now() - t0} ms\n`)

  for (const limit of [500, 10]) {
    engine.listConsumptionForPool('bench', limit) // warm-up (page cache, statement cache)
    const times = []
    let n = 0
    for (let r = 0; r < RUNS; r++) {
      const start = process.hrtime.bigint()
      n = engine.listConsumptionForPool('bench', limit).length
      times.push(Number(process.hrtime.bigint() - start) / 1e6)
    }
    times.sort((a, b) => a - b)
    console.log(
      `listConsumptionForPool  rows=${ROWS}  share=${SHARE}%  limit=${limit}  returned=${n}  median ${times[RUNS >> 1].toFixed(2)} ms  max ${times[RUNS - 1].toFixed(2)} ms`,
    )
  }
} finally {
  engine.closeQuotaDb()
  fs.rmSync(tmp, { recursive: true, force: true })
}
