// Child process: argv dir, mode ("engine": the host fixture with the engine recording;
// "alone": better-sqlite3 only, the control). The host commits call-log rows, the engine
// records, then the process ends normally with both connections open, as a server's does.
// "late": as "engine", and at exit the host's own exit listener (added after the engine's)
// closes its connection, then a request still in flight records once more. "worker": as
// "engine", with a worker thread still recording while the main thread closes the host's
// connection and calls process.exit(); the worker prints how many records it made.
import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'
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
  const late = { apiKeyId: 'exit-key', connectionId: 'exit-conn', provider: 'exit', cost: { requests: 1 } }
  if (mode === 'late') {
    process.on('exit', () => {
      host.stop()
      recordConsumption(late)
    })
  } else if (mode === 'worker') {
    const worker = new Worker(
      `const { parentPort } = require('node:worker_threads')
      const { recordConsumption } = require('@omniroute/quota-engine/compat/enforce')
      const late = ${JSON.stringify(late)}
      ;(async () => {
        for (let made = 1; ; made++) {
          await recordConsumption(late)
          parentPort.postMessage(made)
          await new Promise((resolve) => setImmediate(resolve))
        }
      })()`,
      { eval: true },
    )
    let made = 0
    await new Promise((resolve) =>
      worker.on('message', (n) => {
        made = n
        if (made >= 200) resolve()
      }),
    )
    host.stop()
    process.stdout.write(`DONE worker made at least ${made}\n`)
    process.exit(0)
  }
}
process.stdout.write('DONE\n')
