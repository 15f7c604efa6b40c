'use strict'
// The QuotaStore interface (CONTRACT §4) over the native SQLite driver, and the driver
// factory. Each method is one synchronous native call returned as a settled promise:
// `consume` resolves after its write committed.
const native = require('../binding.js')
const host = require('./host.js')

function settle(fn) {
  try {
    return Promise.resolve(fn())
  } catch (err) {
    return Promise.reject(err)
  }
}

/** The default driver: counters in the host's storage.sqlite. */
class SqliteQuotaStore {
  /** Adds `cost` to the current bucket; resolves to the new effective value. */
  consume(apiKeyId, dim, cost) {
    return settle(() => native.storeConsume(apiKeyId, dim, cost))
  }

  /** The effective value, no write. */
  peek(apiKeyId, dim) {
    return settle(() => native.storePeek(apiKeyId, dim))
  }

  /** The sliding formula over every key's summed buckets of `dim`. */
  poolConsumedTotal(poolId, dim) {
    return settle(() => native.storePoolConsumedTotal(dim))
  }

  /** A pool with no plan: `{ poolId, generatedAt, dimensions: [] }`. */
  poolUsage(poolId) {
    return settle(() => native.storePoolUsage(poolId, null))
  }

  /** Per-key use, fair share, deficit and borrowing for each plan dimension. */
  poolUsageWithDimensions(poolId, planDims) {
    return settle(() => native.storePoolUsage(poolId, planDims ?? null))
  }

  /** Zeroes the key's counter. */
  clear(apiKeyId, dim) {
    return settle(() => native.storeClear(apiKeyId, dim))
  }
}

let sqliteStore = null

/** The process's SqliteQuotaStore. */
function getSqliteQuotaStore() {
  if (!sqliteStore) sqliteStore = new SqliteQuotaStore()
  return sqliteStore
}

let singleton = null
let pending = null

function readDriverSetting() {
  try {
    const raw = native.readHostSetting('settings', 'quotaStore')
    if (!raw) return {}
    const value = JSON.parse(raw)
    return value && typeof value === 'object' ? value : {}
  } catch (err) {
    host.log('warn', 'quota:factory', 'could not read the quotaStore setting; using the environment', {
      error: String(err && err.message),
    })
    return {}
  }
}

function chooseStore() {
  const setting = readDriverSetting()
  const driver = setting.driver || process.env.QUOTA_STORE_DRIVER || 'sqlite'
  const redisUrl = setting.redisUrl || process.env.QUOTA_STORE_REDIS_URL || ''
  if (driver === 'redis') {
    host.log(
      'warn',
      'quota:factory',
      redisUrl
        ? `Redis quota store is not available in this build (url ${host.maskSecrets(redisUrl)}); falling back to SQLite`
        : 'QUOTA_STORE_DRIVER=redis without a Redis URL; falling back to SQLite',
    )
  } else if (driver !== 'sqlite') {
    host.log('warn', 'quota:factory', `unknown quota store driver ${JSON.stringify(driver)}; using SQLite`)
  }
  return getSqliteQuotaStore()
}

/** The process's store: the host's DB setting, then the environment, then SQLite. Never rejects. */
function getQuotaStore() {
  if (singleton) return Promise.resolve(singleton)
  if (!pending) {
    pending = Promise.resolve().then(() => {
      try {
        singleton = chooseStore()
      } catch (err) {
        host.log('warn', 'quota:factory', 'choosing the quota store failed; using SQLite', { error: String(err && err.message) })
        singleton = getSqliteQuotaStore()
      }
      pending = null
      return singleton
    })
  }
  return pending
}

/** The store chosen by `getQuotaStore()`; throws before that first resolved. */
function getQuotaStoreSync() {
  if (!singleton) throw new Error('getQuotaStoreSync() called before getQuotaStore() resolved')
  return singleton
}

/** Forgets the chosen store (the next `getQuotaStore()` chooses again). */
function resetQuotaStoreSingleton() {
  singleton = null
  pending = null
}

/** Runs the retention sweep now; resolves to the number of rows deleted. */
function gcConsumption() {
  return settle(() => native.gcConsumptionSync(host.config.retentionDays()))
}

/** `deletePool(id)` → Promise<boolean>. */
function deletePool(id) {
  return settle(() => native.deletePoolSync(id))
}

module.exports = {
  SqliteQuotaStore,
  getSqliteQuotaStore,
  getQuotaStore,
  getQuotaStoreSync,
  resetQuotaStoreSingleton,
  gcConsumption,
  deletePool,
}
