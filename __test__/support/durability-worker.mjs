// Child process for the durability tests and `bench/durability.mjs`: records requests until
// it is killed (or told to stop), logging each resolved request to a file so the parent
// knows, after a kill, which requests resolved and when.
// argv: DATA_DIR, logFile, rate ("turn": one request per event-loop turn, as a server
// sees them; "saturate": back to back, never yielding to the event loop), apiKeyId,
// connectionId, provider, poolId[, "host-handler"].
// Per request: recordConsumption({ requests: 1 }) and SqliteQuotaStore.consume(+1) on
// `poolId:requests:daily`, both awaited, then a line "<n> <ms since epoch>" (sub-ms).
// With "host-handler" the child listens for SIGTERM itself (as a host would): it prints
// HOST-HANDLED, stops recording and lets the event loop drain.
// Prints "READY" after the first 200 requests.
import fs from 'node:fs'
import { createRequire } from 'node:module'

const [dataDir, logFile, rate, apiKeyId, connectionId, provider, poolId, option] = process.argv.slice(2)
process.env.DATA_DIR = dataDir
const { recordConsumption, getSqliteQuotaStore } = createRequire(import.meta.url)('@omniroute/quota-engine')
const store = getSqliteQuotaStore()
const dim = { poolId, unit: 'requests', window: 'daily' }
const log = fs.openSync(logFile, 'w')
const now = () => performance.timeOrigin + performance.now()
let stop = false
if (option === 'host-handler') {
  process.on('SIGTERM', () => {
    stop = true
    process.stdout.write('HOST-HANDLED\n')
  })
}

let n = 0
async function request() {
  await recordConsumption({ apiKeyId, connectionId, provider, cost: { requests: 1 } })
  await store.consume(apiKeyId, dim, 1)
  n += 1
  fs.writeSync(log, `${n} ${now().toFixed(3)}\n`)
  if (n === 200) process.stdout.write('READY\n')
}

if (rate === 'turn') {
  const next = () => {
    if (stop) return
    request().then(() => setImmediate(next))
  }
  next()
} else {
  while (!stop) await request() // microtasks only: no timer, no I/O callback runs
}
