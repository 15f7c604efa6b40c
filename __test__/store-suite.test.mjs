// The shared QuotaStore suite (support/store-suite.mjs) on the SQLite driver; the Redis
// runs are in redis-store.test.mjs and redis-cluster.test.mjs.
import { after } from 'node:test'
import { createRequire } from 'node:module'
import { makeDataDir, openHost } from './support/store-env.mjs'
import { storeSuite } from './support/store-suite.mjs'

const dataDir = makeDataDir('suite-sqlite')
const require = createRequire(import.meta.url)
const { StoreDriver } = require('../lib/stores.js')
const sqliteDriver = new StoreDriver()
const { getSqliteQuotaStore, closeQuotaDb } = require('@omniroute/quota-engine')

after(() => closeQuotaDb())

storeSuite('sqlite', () => ({
  store: getSqliteQuotaStore(),
  at: {
    consume: (apiKeyId, dim, cost, nowMs) => sqliteDriver.consume(apiKeyId, dim, cost, nowMs),
    peek: (apiKeyId, dim, nowMs) => sqliteDriver.peek(apiKeyId, dim, nowMs),
    poolConsumedTotal: (dim, nowMs) => sqliteDriver.poolConsumedTotal(dim, nowMs),
  },
  countWrites: () => {
    const host = openHost(`${dataDir}/storage.sqlite`)
    try {
      return host.prepare('SELECT count(*) AS n FROM quota_consumption').get().n
    } finally {
      host.close()
    }
  },
}))
