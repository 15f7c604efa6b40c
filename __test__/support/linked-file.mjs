// Child process: argv dir. storage.sqlite is a link to real.db beside it (SQLite keeps the
// -wal and -shm beside real.db). The engine records 3, closes and reopens beside the
// host's open connection, and records 2 more. Prints one JSON line: what the host's
// connection counts and what the engine logged.
import fs from 'node:fs'
import path from 'node:path'
import { createRequire } from 'node:module'
import { startHost } from '../../bench/host.mjs'

const [dir] = process.argv.slice(2)
fs.symlinkSync(path.join(dir, 'real.db'), path.join(dir, 'storage.sqlite'))
const host = startHost({ dir, checkpointMs: 0 })
const require = createRequire(import.meta.url)
const engine = require('@omniroute/quota-engine')
const { recordConsumption } = require('@omniroute/quota-engine/compat/enforce')
const request = { apiKeyId: 'ln-key', connectionId: 'ln-conn', provider: 'ln' }
engine.upsertProviderPlan({ connectionId: 'ln-conn', provider: 'ln', dimensions: [{ unit: 'requests', window: 'daily', limit: 1000 }], source: 'manual' })
engine.createPool({ connectionId: 'ln-conn', name: 'ln', allocations: [{ apiKeyId: 'ln-key', weight: 100, policy: 'hard' }] })
await recordConsumption({ ...request, cost: { requests: 3 } })
engine.flushQuotaWrites()
engine.closeQuotaDb()
await recordConsumption({ ...request, cost: { requests: 2 } })
engine.flushQuotaWrites()
const consumed = host.db.prepare('SELECT coalesce(sum(consumed), 0) AS n FROM quota_consumption WHERE api_key_id = ?').get('ln-key').n
console.log(JSON.stringify({ consumed, logs: host.logs.map((l) => l.msg) }))
host.stop()
