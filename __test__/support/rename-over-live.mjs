// Child process: argv dir, order ("engine-first" or "host-first", who closes first at the
// end), variant ("rm-shm": the `-shm` removed before the rename). A backup whose pages are laid out differently (an operator's older copy, vacuumed)
// is renamed over storage.sqlite while the host's connection stays on the old file and
// keeps committing; the engine records 3 before and 4 after. Prints one JSON line: what a
// reader of the path found meanwhile, what one finds at rest, and whether the engine said
// why it did not follow at once.
import fs from 'node:fs'
import { createRequire } from 'node:module'
import { startHost } from '../../bench/host.mjs'

const [dir, order, variant] = process.argv.slice(2)
const require = createRequire(import.meta.url)
const Database = require('better-sqlite3')
const host = startHost({ dir, checkpointMs: 0 })
const engine = require('@omniroute/quota-engine')
const { enforceQuotaShare, recordConsumption } = require('@omniroute/quota-engine/compat/enforce')
const request = { apiKeyId: 'mv-key', connectionId: 'mv-conn', provider: 'mv' }
engine.upsertProviderPlan({ connectionId: 'mv-conn', provider: 'mv', dimensions: [{ unit: 'requests', window: 'daily', limit: 1000 }], source: 'manual' })
engine.createPool({ connectionId: 'mv-conn', name: 'mv', allocations: [{ apiKeyId: 'mv-key', weight: 100, policy: 'hard' }] })
await recordConsumption({ ...request, cost: { requests: 3 } })
engine.flushQuotaWrites()
for (let i = 0; i < 200; i++) host.logCall('mv-key', 'mv-conn', 'mv')
const backup = `${dir}/backup.sqlite`
await host.backup(backup)
const b = new Database(backup)
b.pragma('journal_mode = DELETE')
b.exec('DELETE FROM call_logs WHERE rowid % 2 = 0; VACUUM')
b.close()
if (variant === 'rm-shm') fs.rmSync(`${host.file}-shm`) // the operator removes the -shm first
fs.renameSync(backup, host.file)
await enforceQuotaShare(request)
for (let i = 0; i < 50; i++) host.logCall('mv-key', 'mv-conn', 'mv')
await recordConsumption({ ...request, cost: { requests: 4 } })
engine.flushQuotaWrites()
// Someone reads the file at the path meanwhile (a backup tool, a dashboard).
const peek = new Database(host.file, { readonly: true })
let during
try {
  during = peek.pragma('integrity_check', { simple: true })
} catch (err) {
  during = String(err)
}
peek.close()
if (order === 'engine-first') engine.closeQuotaDb()
host.close()
const reader = new Database(host.file, { readonly: true })
let atRest
try {
  atRest = {
    integrity: reader.pragma('integrity_check', { simple: true }),
    consumed: reader.prepare('SELECT coalesce(sum(consumed), 0) AS n FROM quota_consumption WHERE api_key_id = ?').get('mv-key').n,
  }
} catch (err) {
  atRest = { error: String(err) }
}
const said = host.logs.some((l) => /whose -wal and -shm a connection/.test(JSON.stringify(l)))
console.log(JSON.stringify({ during, ...atRest, said }))
