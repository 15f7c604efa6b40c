// Child process for the multi-client test: argv DATA_DIR, Redis URL, count, apiKeyId,
// poolId. Its own engine, so its own connection; `count` awaited consumes of 1, then
// "DONE <count>". It never closes anything: exiting by itself also shows that the engine's
// native threads do not keep the process alive.
process.env.DATA_DIR = process.argv[2]
const [url, count, apiKeyId, poolId] = process.argv.slice(3)
const { createRequire } = await import('node:module')
const { RedisQuotaStore } = createRequire(import.meta.url)('@omniroute/quota-engine/compat/redisQuotaStore')
const store = new RedisQuotaStore(url)
const dim = { poolId, unit: 'requests', window: 'daily' }
let last = 0
for (let i = 0; i < Number(count); i++) last = await store.consume(apiKeyId, dim, 1)
process.stdout.write(`DONE ${count} ${last}\n`)
