// Child process: argv dir, mode ("engine": the host fixture with the engine recording;
// "alone": better-sqlite3 only, the control). The host commits call-log rows, the engine
// records, then the process ends normally with both connections open, as a server's does.
import { createRequire } from 'node:module'
import { startHost, openHostDb } from '../../bench/host.mjs'

const [dir, mode] = process.argv.slice(2)
if (mode === 'alone') {
  const db = openHostDb(`${dir}/storage.sqlite`)
  const insert = db.prepare("INSERT INTO host_table_0 (name, data) VALUES (?, 'x')")
  for (let i = 0; i < 50; i++) insert.run(`row-${i}`)
} else {
  const host = startHost({ dir, checkpointMs: 0 })
  const require = createRequire(import.meta.url)
  const engine = require('@omniroute/quota-engine')
  const { recordConsumption } = require('@omniroute/quota-engine/compat/enforce')
  engine.upsertProviderPlan({ connectionId: 'exit-conn', provider: 'exit', dimensions: [{ unit: 'requests', window: 'daily', limit: 1e6 }], source: 'manual' })
  engine.createPool({ connectionId: 'exit-conn', name: 'exit', allocations: [{ apiKeyId: 'exit-key', weight: 100, policy: 'hard' }] })
  for (let i = 0; i < 50; i++) {
    host.logCall('exit-key', 'exit-conn', 'exit')
    await recordConsumption({ apiKeyId: 'exit-key', connectionId: 'exit-conn', provider: 'exit', cost: { requests: 1 } })
    await new Promise((resolve) => setImmediate(resolve))
  }
}
process.stdout.write('DONE\n')
