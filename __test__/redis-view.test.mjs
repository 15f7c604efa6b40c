// The Redis counter view (docs/redis.md#the-counter-view): a default-mode enforce whose
// counters were read less than QUOTA_STORE_REDIS_VIEW_MS ago and changed by no one since
// is decided without a round trip; a change by another client (the server's RESP3
// invalidation), a disconnect of the tracking connection and the bound each send the next
// decision back to the read script; reserve mode never uses the view; a server that
// refuses tracking gives no view and one warning, a server error that may pass is
// retried. Redis commands are counted with INFO commandstats; the staleness bound is shown
// with the native crossing's nowMs (injected time), never with a timer.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import Redis from 'ioredis'
import { REDIS_SKIP, startRedis } from './support/redis-server.mjs'
import { useRedisEngine, server, plain, host, warnings } from './support/redis-engine.mjs'
import { enforceQuotaShare, recordConsumption } from '@omniroute/quota-engine/compat/enforce'
import { getQuotaStore, resetQuotaStoreSingleton } from '@omniroute/quota-engine/compat/storeFactory'
import { RedisQuotaStore } from '@omniroute/quota-engine/compat/redisQuotaStore'
import { flushQuotaWrites, metrics, WINDOW_MS } from '@omniroute/quota-engine'

const require = createRequire(import.meta.url)
const native = require('../binding.js')
const skip = REDIS_SKIP
const HOUR = WINDOW_MS.hourly
useRedisEngine('redis-view', { host: { saturationFetchers: { view: async () => 0 } }, env: {
  QUOTA_RECORD_FLUSH_MS: '60000', // no timer flush during a test
  QUOTA_STORE_REDIS_VIEW_MS: '60000', // only an invalidation ends an entry
} })

let seq = 0
function hostPool(key, limit) {
  const id = `vpool-${++seq}-${process.pid}`
  const connection = `vconn-${seq}`
  host.prepare('INSERT INTO quota_pools (id, connection_id, name, group_id) VALUES (?, ?, ?, ?)').run(id, connection, id, null)
  host.prepare('INSERT INTO quota_pool_connections (pool_id, connection_id, created_at) VALUES (?, ?, ?)').run(id, connection, 1000)
  host.prepare('INSERT INTO quota_allocations (pool_id, api_key_id, weight, cap_value, cap_unit, policy) VALUES (?, ?, ?, ?, ?, ?)').run(id, key, 100, null, null, 'hard')
  host.prepare("INSERT OR REPLACE INTO provider_plans (connection_id, provider, dimensions_json, source, updated_at) VALUES (?, ?, ?, 'manual', ?)").run(connection, 'view', JSON.stringify([{ unit: 'requests', window: 'hourly', limit }]), Date.now())
  return { id, connection, request: { apiKeyId: key, connectionId: connection, provider: 'view' } }
}

/** Clear of the hour's end, so no bucket turns during a test. */
async function clearOfTheHour() {
  const left = HOUR - (Date.now() % HOUR)
  if (left < 10_000) await new Promise((resolve) => setTimeout(resolve, left + 10))
}

/** Every command the server ran, by name (INFO itself left out). */
async function commandCalls() {
  const stats = await plain.info('commandstats')
  const calls = {}
  for (const [, name, n] of stats.matchAll(/cmdstat_([a-z|_-]+):calls=(\d+)/g)) {
    if (name !== 'info') calls[name] = Number(n)
  }
  return calls
}

const evalsha = async () => (await commandCalls()).evalsha ?? 0

function metric(name) {
  const line = metrics().split('\n').find((l) => l.startsWith(`${name} `))
  return Number(line.split(' ')[1])
}

async function until(check, what) {
  const deadline = Date.now() + 10_000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/** Enforces `request` until the view holds its counters (a decision made from it). */
async function warm(request) {
  await until(async () => {
    const hits = metric('quota_engine_redis_view_hits_total')
    assert.equal((await enforceQuotaShare(request)).kind, 'allow')
    return metric('quota_engine_redis_view_hits_total') > hits
  }, 'a decision from the view')
}

test('a decision from the view sends no Redis command, and counts this process\'s own buffered records', { skip }, async () => {
  await clearOfTheHour()
  const { id, request } = hostPool('v-own', 5)
  await warm(request)
  assert.equal(metric('quota_engine_redis_view_tracking'), 1)
  const before = await commandCalls()
  const hits = metric('quota_engine_redis_view_hits_total')
  // 5 of 5: each allowed request's record is buffered (no flush), and the view adds the
  // buffer as a read would — so the sixth is blocked, still without a round trip.
  const kinds = []
  for (let i = 0; i < 6; i++) {
    const decision = await enforceQuotaShare(request)
    kinds.push(decision.kind)
    if (decision.kind === 'allow') await recordConsumption({ ...request, cost: {} })
  }
  assert.deepEqual(kinds, ['allow', 'allow', 'allow', 'allow', 'allow', 'block'])
  assert.equal(metric('quota_engine_redis_view_hits_total') - hits, 6)
  assert.deepEqual(await commandCalls(), before, 'no command reached Redis')
  assert.equal(await plain.get(`omniroute:quota:v-own:${id}:requests:hourly:${Math.floor(Date.now() / HOUR)}`), null, 'the records are still buffered')
  // The flush drops the entry (its answer invalidates what it wrote): the next decision is
  // read again, and counts each record once — Redis's 5, nothing buffered.
  assert.equal(flushQuotaWrites(), null)
  const misses = metric('quota_engine_redis_view_misses_total')
  assert.equal((await enforceQuotaShare(request)).kind, 'block')
  assert.equal(metric('quota_engine_redis_view_misses_total') - misses, 1)
})

test('another client\'s write drops the entry: the next decisions see it (long before the 60 s bound)', { skip }, async () => {
  await clearOfTheHour()
  const { id, request } = hostPool('v-other', 10)
  await warm(request)
  const calls = await evalsha()
  // The host's TypeScript driver (another replica) fills the key's bucket to the limit.
  await plain.incrbyfloat(`omniroute:quota:v-other:${id}:requests:hourly:${Math.floor(Date.now() / HOUR)}`, 10)
  await until(async () => (await enforceQuotaShare(request)).kind === 'block', 'the write to be seen')
  assert.ok((await evalsha()) > calls, 'seen by a read, after the invalidation')
  // …and the new counters are a view entry again.
  const hits = metric('quota_engine_redis_view_hits_total')
  await until(async () => (await enforceQuotaShare(request)).kind === 'block' && metric('quota_engine_redis_view_hits_total') > hits, 'a block from the view')
})

test('a disconnect of the tracking connection drops the view; it comes back after the reconnect', { skip }, async () => {
  await clearOfTheHour()
  const { request } = hostPool('v-drop', 10)
  await warm(request)
  const lost = metric('quota_engine_redis_view_disconnects_total')
  await plain.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes')
  await until(async () => metric('quota_engine_redis_view_disconnects_total') > lost, 'the disconnect to be seen')
  const misses = metric('quota_engine_redis_view_misses_total')
  const calls = await evalsha()
  assert.equal((await enforceQuotaShare(request)).kind, 'allow')
  assert.equal(metric('quota_engine_redis_view_misses_total') - misses, 1, 'read again, not decided from the dropped view')
  assert.equal((await evalsha()) - calls, 1)
  await warm(request)
  assert.equal(metric('quota_engine_redis_view_tracking'), 1)
})

test('reserve mode never uses the view: every enforce is one script call', { skip }, async () => {
  await clearOfTheHour()
  const { request } = hostPool('v-reserve', 100)
  await warm(request)
  process.env.QUOTA_ADMISSION = 'reserve'
  try {
    await enforceQuotaShare(request) // loads reserve.lua (NOSCRIPT, SCRIPT LOAD): not counted
    const hits = metric('quota_engine_redis_view_hits_total')
    const calls = await evalsha()
    for (let i = 0; i < 3; i++) {
      const decision = await enforceQuotaShare(request)
      assert.equal(decision.kind, 'allow')
      assert.ok(decision.reservation, 'a reservation, made by the script')
    }
    assert.equal((await evalsha()) - calls, 3)
    assert.equal(metric('quota_engine_redis_view_hits_total'), hits)
  } finally {
    delete process.env.QUOTA_ADMISSION
  }
})

test('the staleness bound: an entry read at T answers until T + QUOTA_STORE_REDIS_VIEW_MS (injected time)', { skip }, async () => {
  await clearOfTheHour()
  process.env.QUOTA_STORE_REDIS_VIEW_MS = '100'
  try {
    const { request } = hostPool('v-age', 10)
    await warm(request) // tracking up
    const T = Date.now() + 1000 // later than every read so far
    const at = async (nowMs) => {
      const hits = metric('quota_engine_redis_view_hits_total')
      const answer = await native.enforce(request.apiKeyId, request.connectionId, request.provider, undefined, undefined, undefined, undefined, undefined, nowMs)
      assert.equal(typeof answer, 'number', `an allow (${JSON.stringify(answer)})`)
      return metric('quota_engine_redis_view_hits_total') > hits ? 'view' : 'script'
    }
    // Read at T (kept with T), then T + 1 … T + 99 from the view, T + 100 read again.
    await until(async () => (await at(T)) === 'script', 'a read at T')
    assert.equal(await at(T + 1), 'view')
    assert.equal(await at(T + 99), 'view')
    assert.equal(await at(T + 100), 'script')
    assert.equal(await at(T + 150), 'view', 'the read at T + 100 is the entry now')
    // A clock that went back is no fresher.
    assert.equal(await at(T + 99), 'script')
  } finally {
    process.env.QUOTA_STORE_REDIS_VIEW_MS = '60000'
  }
})

test('QUOTA_STORE_REDIS_VIEW_MS=0: no view, every enforce reads', { skip }, async () => {
  await clearOfTheHour()
  const { request } = hostPool('v-off', 10)
  await warm(request)
  process.env.QUOTA_STORE_REDIS_VIEW_MS = '0'
  try {
    const calls = await evalsha()
    for (let i = 0; i < 3; i++) assert.equal((await enforceQuotaShare(request)).kind, 'allow')
    assert.equal((await evalsha()) - calls, 3)
  } finally {
    process.env.QUOTA_STORE_REDIS_VIEW_MS = '60000'
  }
})

/** Peeks `dim` of `key` until a peek sends no Redis command (answered from the view). */
async function warmPeek(store, key, dim) {
  await until(async () => {
    const before = await commandCalls()
    await store.peek(key, dim)
    return JSON.stringify(await commandCalls()) === JSON.stringify(before)
  }, 'a peek from the view')
}

test('peek from the view: no Redis command, and this process\'s own buffered records are counted', { skip }, async () => {
  await clearOfTheHour()
  const { id, request } = hostPool('v-peek', 100)
  const store = await getQuotaStore()
  const dim = { poolId: id, unit: 'requests', window: 'hourly' }
  await plain.incrbyfloat(`omniroute:quota:v-peek:${id}:requests:hourly:${Math.floor(Date.now() / HOUR)}`, 4)
  await warmPeek(store, 'v-peek', dim)
  const before = await commandCalls()
  assert.equal(await store.peek('v-peek', dim), 4)
  for (let i = 1; i <= 3; i++) {
    await recordConsumption({ ...request, cost: {} }) // buffered: no flush in this file
    assert.equal(await store.peek('v-peek', dim), 4 + i, 'its own record, not yet on Redis')
  }
  assert.deepEqual(await commandCalls(), before, 'no command reached Redis')
  assert.equal(flushQuotaWrites(), null)
  // The flush's answer dropped the entry: read again, each record counted once.
  const calls = await evalsha()
  assert.equal(await store.peek('v-peek', dim), 7)
  assert.equal((await evalsha()) - calls, 1)
})

test('peek sees another client\'s write once its invalidation arrives (long before the 60 s bound)', { skip }, async () => {
  await clearOfTheHour()
  const { id } = hostPool('v-peek-other', 100)
  const store = await getQuotaStore()
  const dim = { poolId: id, unit: 'requests', window: 'hourly' }
  await warmPeek(store, 'v-peek-other', dim)
  assert.equal(await store.peek('v-peek-other', dim), 0)
  const calls = await evalsha()
  await plain.incrbyfloat(`omniroute:quota:v-peek-other:${id}:requests:hourly:${Math.floor(Date.now() / HOUR)}`, 9)
  await until(async () => (await store.peek('v-peek-other', dim)) === 9, 'the write to be seen')
  assert.ok((await evalsha()) > calls, 'seen by a read, after the invalidation')
  await warmPeek(store, 'v-peek-other', dim)
  assert.equal(await store.peek('v-peek-other', dim), 9, 'and the new value is the entry')
})

test('peek in reserve mode, or with QUOTA_STORE_REDIS_VIEW_MS=0, reads Redis every time', { skip }, async () => {
  await clearOfTheHour()
  const { id } = hostPool('v-peek-off', 100)
  const store = await getQuotaStore()
  const dim = { poolId: id, unit: 'requests', window: 'hourly' }
  await warmPeek(store, 'v-peek-off', dim)
  for (const [name, value] of [['QUOTA_ADMISSION', 'reserve'], ['QUOTA_STORE_REDIS_VIEW_MS', '0']]) {
    const saved = process.env[name]
    process.env[name] = value
    try {
      const calls = await evalsha()
      for (let i = 0; i < 3; i++) assert.equal(await store.peek('v-peek-off', dim), 0)
      assert.equal((await evalsha()) - calls, 3, `${name}=${value}: one read.lua per peek`)
    } finally {
      if (saved === undefined) delete process.env[name]
      else process.env[name] = saved
    }
  }
})

/** Runs `body` with the engine on `other` (a server of the test's own, `probe` its client), then back on the suite's. */
async function onServer(other, probe, body) {
  process.env.QUOTA_STORE_REDIS_URL = other.url
  resetQuotaStoreSingleton()
  try {
    const store = await getQuotaStore()
    assert.ok(store instanceof RedisQuotaStore)
    await body(store)
  } finally {
    probe.disconnect()
    process.env.QUOTA_STORE_REDIS_URL = server.url
    resetQuotaStoreSingleton()
    await getQuotaStore()
    await other.stop()
  }
}

// CLIENT renamed away: HELLO 3 works, CLIENT TRACKING is an unknown command (as on a proxy
// that does not pass it; Redis < 6 refuses HELLO itself). An ACL without CLIENT: NOPERM.
for (const [how, args, setup] of [
  ['CLIENT renamed away', ['--rename-command', 'CLIENT', ''], async () => {}],
  ['an ACL without CLIENT', [], (probe) => probe.call('ACL', 'SETUSER', 'default', '-client')],
]) {
  test(`a server that refuses client tracking (${how}): no view, one warning, enforce still reads`, { skip }, async () => {
    const refusing = await startRedis({ args })
    const probe = new Redis(refusing.url, { maxRetriesPerRequest: 1 })
    await onServer(refusing, probe, async () => {
      await setup(probe) // before the first enforce starts the tracking connection
      await clearOfTheHour()
      const { request } = hostPool('v-refused', 10)
      warnings.length = 0
      const hits = metric('quota_engine_redis_view_hits_total')
      await until(async () => {
        assert.equal((await enforceQuotaShare(request)).kind, 'allow')
        return warnings.some((w) => /refused client tracking/.test(w.msg))
      }, 'the warning')
      const before = Number((await probe.info('commandstats')).match(/cmdstat_evalsha:calls=(\d+)/)[1])
      for (let i = 0; i < 5; i++) assert.equal((await enforceQuotaShare(request)).kind, 'allow')
      const after = Number((await probe.info('commandstats')).match(/cmdstat_evalsha:calls=(\d+)/)[1])
      assert.equal(after - before, 5, 'every enforce read')
      assert.equal(metric('quota_engine_redis_view_hits_total'), hits)
      assert.equal(warnings.filter((w) => /refused client tracking/.test(w.msg)).length, 1, 'one warning')
    })
  })
}

test('a server error that may pass (NOAUTH while a password is set) keeps the view off, said once, until it passes; a drop after it is retried as drops are', { skip }, async () => {
  const other = await startRedis()
  const probe = new Redis(other.url, { maxRetriesPerRequest: 1 })
  await onServer(other, probe, async (store) => {
    await clearOfTheHour()
    const { id, request } = hostPool('v-noauth', 10)
    // The command connection is made first (a write does not start the view); connections
    // already authenticated stay so when a password is set.
    assert.equal(await store.consume('v-noauth', { poolId: id, unit: 'requests', window: 'hourly' }, 1), 1)
    const tracking = metric('quota_engine_redis_view_tracking') // the suite server's view
    await probe.config('SET', 'requirepass', 'set-meanwhile')
    warnings.length = 0
    const misses = metric('quota_engine_redis_view_misses_total')
    await until(async () => {
      assert.equal((await enforceQuotaShare(request)).kind, 'allow')
      return metric('quota_engine_redis_view_misses_total') - misses >= 3
    }, 'enforces that read')
    // The tracking connection meets NOAUTH: the view is off, not given up, and said once
    // when it keeps coming.
    const keeps = () => warnings.filter((w) => /keeps refusing the counter view's tracking connection/.test(w.msg))
    await until(async () => {
      assert.equal((await enforceQuotaShare(request)).kind, 'allow') // hands the engine's log records over
      return keeps().length > 0
    }, 'the warning')
    assert.match(keeps()[0].detail, /NOAUTH/)
    assert.equal(metric('quota_engine_redis_view_tracking'), tracking)
    // Then the server goes away for 8 s and comes back without the password: a drop ends
    // the run of answered errors, so it is retried as drops are (every 2 s at most), not
    // at the answered errors' waits (the next of which would come 4 s after it is back).
    await other.kill()
    await new Promise((resolve) => setTimeout(resolve, 8000))
    await other.start()
    const back = Date.now()
    await warm(request)
    assert.ok(Date.now() - back < 3000, `the view came back ${Date.now() - back} ms after the server`)
    assert.equal(metric('quota_engine_redis_view_tracking'), tracking + 1)
    assert.equal(keeps().length, 1)
    assert.deepEqual(warnings.filter((w) => /refused client tracking/.test(w.msg)), [])
  })
})

test('poolConsumedTotal from the view: no Redis command, this process\'s buffered records counted, another client\'s write seen', { skip }, async () => {
  await clearOfTheHour()
  const { id, request } = hostPool('v-total', 100)
  const store = await getQuotaStore()
  const dim = { poolId: id, unit: 'requests', window: 'hourly' }
  const bucket = Math.floor(Date.now() / HOUR)
  await plain.incrbyfloat(`omniroute:quota:v-total:${id}:requests:hourly:${bucket}`, 5)
  await until(async () => {
    const before = await commandCalls()
    await store.poolConsumedTotal(id, dim)
    return JSON.stringify(await commandCalls()) === JSON.stringify(before)
  }, 'a pool total from the view')
  const before = await commandCalls()
  assert.equal(await store.poolConsumedTotal(id, dim), 5)
  await recordConsumption({ ...request, cost: {} }) // buffered
  assert.equal(await store.poolConsumedTotal(id, dim), 6, 'its own record, not yet on Redis')
  assert.deepEqual(await commandCalls(), before, 'no command reached Redis')
  assert.equal(flushQuotaWrites(), null)
  assert.equal(await store.poolConsumedTotal(id, dim), 6, 'read again after the flush: counted once')
  // Another member's counter, written by another client: invalidated, then read.
  await plain.incrbyfloat(`omniroute:quota:v-total:${id}:requests:hourly:${bucket}`, 10)
  await until(async () => (await store.poolConsumedTotal(id, dim)) === 16, 'the other client\'s write')
})
