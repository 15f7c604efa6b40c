// Child process: argv DATA_DIR, count, apiKeyId, poolId[, mode].
// mode "hold": after `count` awaited consumes print "DONE <count>" and wait forever.
process.env.DATA_DIR = process.argv[2]
const count = Number(process.argv[3])
const apiKeyId = process.argv[4]
const poolId = process.argv[5]
const mode = process.argv[6] || 'exit'
const { createRequire } = await import('node:module')
const { getSqliteQuotaStore, closeQuotaDb } = createRequire(import.meta.url)('@omniroute/quota-engine')
const store = getSqliteQuotaStore()
const dim = { poolId, unit: 'requests', window: 'daily' }
for (let i = 0; i < count; i++) await store.consume(apiKeyId, dim, 1)
process.stdout.write(`DONE ${count}\n`)
if (mode === 'hold') setInterval(() => {}, 1 << 30)
else closeQuotaDb()
