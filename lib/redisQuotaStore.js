'use strict'
// The Redis driver's JavaScript side (docs/contract.md §4; appendix `redisQuotaStore`):
// the ioredis-like client over the engine's shared connection to a URL (src/store/redis/,
// on the addon's tokio runtime), and the store classes' Redis half (lib/stores.js).
const native = require('./native.js')
const { typeError } = require('./invalidArg.js')
const { RedisQuotaStore, getRedisQuotaStore, resetRedisQuotaStore, settle } = require('./stores.js')

function checkUrl(url) {
  if (typeof url !== 'string' || url === '') throw typeError('url', 'a redis:// URL string', url)
  return url
}

function closedError() {
  const err = new Error('Connection is closed.')
  err.code = 'ERR_QUOTA_REDIS_UNAVAILABLE'
  return err
}

function flatten(args) {
  return args.flatMap((a) => (Array.isArray(a) ? a : [a]))
}

/**
 * An ioredis-like client on the engine's shared connection to one URL. Every method
 * returns a promise and is bounded by `QUOTA_STORE_REDIS_TIMEOUT_MS`.
 */
class RedisClient {
  constructor(url) {
    /** The URL this client talks to. */
    this.url = url
    /** `"ready"`, or `"end"` after `quit()`. */
    this.status = 'ready'
  }

  /** Any command: `call("SET", "k", "v")`. */
  call(command, ...args) {
    if (this.status === 'end') return Promise.reject(closedError())
    return settle(() => native.redisCommand(this.url, [command, ...flatten(args)]))
  }

  /** `INCRBYFLOAT key increment` → the new value as a decimal string. */
  incrbyfloat(key, increment) {
    return this.call('INCRBYFLOAT', key, increment)
  }

  /** `EXPIRE key seconds` → 1, or 0 when the key does not exist. */
  expire(key, seconds) {
    return this.call('EXPIRE', key, seconds)
  }

  /** `MGET key…` (keys as arguments or one array) → values, `null` when absent. */
  mget(...keys) {
    return this.call('MGET', ...keys)
  }

  /** `EVAL script numKeys key… arg…`. */
  eval(script, numKeys, ...keysAndArgs) {
    return this.call('EVAL', script, numKeys, ...keysAndArgs)
  }

  /** `DEL key…` → how many keys were removed. */
  del(...keys) {
    return this.call('DEL', ...keys)
  }

  /** `PING` → `"PONG"`. */
  ping() {
    return this.call('PING')
  }

  /** Closes this URL's shared connection; later calls on this client reject. */
  quit() {
    if (this.status === 'end') return Promise.resolve('OK')
    this.status = 'end'
    if (clients.get(this.url) === this) clients.delete(this.url)
    native.redisForget(this.url)
    return Promise.resolve('OK')
  }
}

const clients = new Map()

/**
 * The client of `url` (one per URL until `quit()` or `resetRedisClient()`). Connects
 * lazily: an unreachable server makes the client's calls reject (within the timeout), not
 * this function. Rejects with a `RangeError` for a URL the engine cannot use.
 */
async function getRedisClient(url) {
  checkUrl(url)
  let client = clients.get(url)
  if (!client) {
    native.redisTarget(url) // validates the URL (RangeError naming `url`, password masked)
    client = new RedisClient(url)
    clients.set(url, client)
  }
  return client
}

/** Closes every client's connection (each URL's next use connects again). */
function resetRedisClient() {
  for (const client of clients.values()) client.status = 'end'
  clients.clear()
  native.redisForget(null)
}

module.exports = {
  RedisQuotaStore,
  RedisClient,
  getRedisClient,
  resetRedisClient,
  getRedisQuotaStore,
  resetRedisQuotaStore,
}
