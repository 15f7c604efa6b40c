// The setup the Redis hot-path tests share: a redis-server of their own, a plain ioredis
// client to look at it, the host's database (the engine keeps its metadata there) and the
// engine switched to the Redis driver by environment. `server`, `plain` and `host` are
// live bindings, set once the suite's `before` has run.
import { before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import Redis from 'ioredis'
import { openHost } from './store-env.mjs'
import { REDIS_SKIP, startRedis } from './redis-server.mjs'
import { installHost } from '@omniroute/quota-engine/compat/host'
import { getQuotaStore, resetQuotaStoreSingleton } from '@omniroute/quota-engine/compat/storeFactory'
import { RedisQuotaStore, resetRedisClient } from '@omniroute/quota-engine/compat/redisQuotaStore'
import { closeQuotaDb, createPool } from '@omniroute/quota-engine'

export let server
export let plain
export let host
/** What the engine warned about, `{ ...fields, msg }`. */
export const warnings = []
/** Servers a test started besides `server`, stopped with it. */
export const stopped = []

/**
 * The lighter setup of the store and client tests: a redis-server of their own, the plain
 * client, `installHost({ logger })`; the client, the engine's database and every server
 * are closed after.
 */
export function useRedisServer(logger) {
  before(async () => {
    if (REDIS_SKIP) return
    installHost({ logger })
    server = await startRedis()
    plain = new Redis(server.url, { maxRetriesPerRequest: 1 })
  })
  after(async () => {
    plain?.disconnect()
    resetRedisClient()
    closeQuotaDb()
    await Promise.all([server, ...stopped].filter(Boolean).map((s) => s.stop()))
  })
}

/**
 * Registers the suite's `before`/`after`: `env` is set before the driver is chosen and
 * removed after; `host` is what `installHost` gets besides the database and the logger
 * (and what `install(extra)` gives it again, with `extra`).
 */
export function useRedisEngine(tag, { env = {}, host: hostOptions = {} } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `qe-${tag}-`))
  const dbPath = path.join(dir, 'storage.sqlite')
  const logger = { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} }
  const vars = { QUOTA_STORE_DRIVER: 'redis', ...env }
  const install = (extra = {}) => installHost({ dbPath, logger, ...hostOptions, ...extra })
  before(async () => {
    if (REDIS_SKIP) return
    server = await startRedis()
    plain = new Redis(server.url, { maxRetriesPerRequest: 1 })
    install()
    createPool({ connectionId: 'bootstrap', name: 'bootstrap' }) // the engine creates the schema
    host = openHost(dbPath)
    Object.assign(process.env, vars, { QUOTA_STORE_REDIS_URL: server.url })
    resetQuotaStoreSingleton()
    assert.ok((await getQuotaStore()) instanceof RedisQuotaStore)
  })
  after(async () => {
    for (const name of [...Object.keys(vars), 'QUOTA_STORE_REDIS_URL']) delete process.env[name]
    resetQuotaStoreSingleton()
    resetRedisClient()
    plain?.disconnect()
    host?.close()
    closeQuotaDb()
    await server?.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  })
  return { dir, dbPath, install }
}
