'use strict'
// The QuotaStore interface (docs/contract.md §4) and the driver factory. Both store
// classes are one `StoreDriver` each (SQLite, or Redis at a URL; the engine numbers them
// and its native store functions take that number, dim and its three fields); the engine
// dispatches on the driver and chooses the process's (getQuotaStore). Every method
// returns a promise: SQLite's settled at once, Redis's after one round trip.
const native = require('./native.js')
const host = require('./host.js')
const { typeError } = require('./invalidArg.js')
const writes = require('./writeBuffer.js')

/**
 * `fn()` as a promise: its value, or its throw as a rejection. What the call logged (it may
 * open the database) reaches the host's logger as it returns.
 */
function settle(fn) {
  try {
    return Promise.resolve(fn())
  } catch (err) {
    return Promise.reject(err)
  } finally {
    host.drainLogs()
  }
}

/**
 * One driver's counters, at a time given or now: what both stores are made of (and what
 * the CLI and the tests use to set the time). The native store functions take the
 * driver's number, `dim` (whose type they check) and its three fields, read here: three
 * N-API property reads would cost more than a SQLite `consume`'s own work.
 */
class StoreDriver {
  /** SQLite without `url`; Redis at `url` (a RangeError naming `url` when the engine cannot use it; nothing connects yet). */
  constructor(url = null) {
    this.number = native.storeDriver(url)
    /** The Redis URL, as given; `null` on SQLite. */
    this.url = url
  }

  /** `'sqlite'` or `'redis'`. */
  get driver() {
    return this.url === null ? 'sqlite' : 'redis'
  }

  consume(apiKeyId, dim, cost, nowMs) {
    return native.storeConsume(this.number, apiKeyId, dim, dim?.poolId, dim?.unit, dim?.window, cost, nowMs)
  }

  peek(apiKeyId, dim, nowMs) {
    return native.storePeek(this.number, apiKeyId, dim, dim?.poolId, dim?.unit, dim?.window, nowMs)
  }

  poolConsumedTotal(dim, nowMs) {
    return native.storePoolConsumedTotal(this.number, dim, dim?.poolId, dim?.unit, dim?.window, nowMs)
  }

  clear(apiKeyId, dim, nowMs) {
    return native.storeClear(this.number, apiKeyId, dim, dim?.poolId, dim?.unit, dim?.window, nowMs)
  }

  poolUsage(poolId, planDims, nowMs) {
    return native.storePoolUsage(this.number, poolId, planDims, nowMs)
  }
}

const DRIVER = Symbol('driver')

/** The methods both stores share; `driver()` gives the StoreDriver. */
class CounterStore {
  /** Adds `cost` to the current bucket; resolves to the new effective value. */
  consume(apiKeyId, dim, cost) {
    return settle(() => this[DRIVER]().consume(apiKeyId, dim, cost))
  }

  /** The effective value, no write. */
  peek(apiKeyId, dim) {
    return settle(() => this[DRIVER]().peek(apiKeyId, dim))
  }

  /** The sliding formula over every key's summed buckets of `dim`. */
  poolConsumedTotal(_poolId, dim) {
    return settle(() => this[DRIVER]().poolConsumedTotal(dim))
  }

  /** A pool with no plan: `{ poolId, generatedAt, dimensions: [] }`. */
  poolUsage(poolId) {
    return settle(() => this[DRIVER]().poolUsage(poolId, null))
  }

  /** Per-key use, fair share, deficit and borrowing for each plan dimension. */
  poolUsageWithDimensions(poolId, planDims) {
    return settle(() => this[DRIVER]().poolUsage(poolId, planDims ?? null))
  }

  /** Zeroes the key's counter. */
  clear(apiKeyId, dim) {
    return settle(() => this[DRIVER]().clear(apiKeyId, dim))
  }
}

const sqliteDriver = new StoreDriver()

/** The default driver: counters in the host's storage.sqlite. */
class SqliteQuotaStore extends CounterStore {
  [DRIVER]() {
    return sqliteDriver
  }

  /** Adds `cost` to the current bucket (buffered, committed by time like the records); resolves to the new effective value. */
  consume(apiKeyId, dim, cost) {
    const value = super.consume(apiKeyId, dim, cost)
    writes.scheduleFlush()
    return value
  }
}

/**
 * Counters on Redis, shared by every replica; metadata (pools, allocations, plans) stays in
 * SQLite. Keys, values and TTLs are the host's TypeScript driver's, so replicas running
 * either read each other's counters.
 */
class RedisQuotaStore extends CounterStore {
  #driver = null

  /** @param {string} url `redis://…`, or `redis+cluster://host:port[,host:port…]`. */
  constructor(url) {
    super()
    if (typeof url !== 'string' || url === '') throw typeError('url', 'a redis:// URL string', url)
    /** The URL this store's counters live at. */
    this.url = url
  }

  // Made on first use, so a URL the engine cannot use rejects the operation, as a
  // connection failure would, rather than throwing from the constructor; made again when
  // `url` was set since (each call uses the url the store has then).
  [DRIVER]() {
    if (this.#driver === null || this.#driver.url !== this.url) this.#driver = new StoreDriver(this.url)
    return this.#driver
  }
}

let sqliteStore = null

/** The process's SqliteQuotaStore. */
function getSqliteQuotaStore() {
  if (!sqliteStore) sqliteStore = new SqliteQuotaStore()
  return sqliteStore
}

const redisStores = new Map()

/** The RedisQuotaStore of `url` (one instance per URL). */
function getRedisQuotaStore(url) {
  if (typeof url !== 'string' || url === '') throw typeError('url', 'a redis:// URL string', url)
  let store = redisStores.get(url)
  if (!store) {
    store = new RedisQuotaStore(url)
    redisStores.set(url, store)
  }
  return store
}

/** Forgets the RedisQuotaStore instances (connections stay; see `resetRedisClient`). */
function resetRedisQuotaStore() {
  redisStores.clear()
}

function storeOf(chosen) {
  return chosen.driver === 'redis' ? getRedisQuotaStore(chosen.url) : getSqliteQuotaStore()
}

/** The process's store: the host's DB setting, then the environment, then SQLite. Never rejects. */
async function getQuotaStore() {
  try {
    const chosen = await settle(() => native.chooseStore())
    native.announceStore(chosen.choice)
    return storeOf(chosen)
  } catch (err) {
    host.log('warn', 'quota:factory', 'choosing the quota store failed; using SQLite', { error: host.errorText(err) })
    return getSqliteQuotaStore()
  } finally {
    host.drainLogs()
  }
}

/** The store chosen by `getQuotaStore()`; throws before that first resolved. */
function getQuotaStoreSync() {
  const chosen = native.chosenStoreNow()
  if (!chosen) throw new Error('getQuotaStoreSync() called before getQuotaStore() resolved')
  return storeOf(chosen)
}

/** Forgets the chosen store (the next `getQuotaStore()` chooses again). */
function resetQuotaStoreSingleton() {
  native.resetStoreChoice()
}

/** Runs the retention sweep now; resolves to the number of rows deleted. */
function gcConsumption() {
  return settle(() => native.gcConsumption())
}

/** `deletePool(id)` → Promise<boolean>. */
function deletePool(id) {
  return settle(() => native.deletePoolNow(id))
}

module.exports = {
  SqliteQuotaStore,
  RedisQuotaStore,
  getSqliteQuotaStore,
  getRedisQuotaStore,
  resetRedisQuotaStore,
  getQuotaStore,
  getQuotaStoreSync,
  resetQuotaStoreSingleton,
  gcConsumption,
  deletePool,
  settle,
  StoreDriver,
}
