// The direct connection (docs/redis.md#the-direct-connection): the ioredis-like client's
// commands go out on a plain-TCP socket the calling JavaScript thread's own event loop
// watches, named `quota-engine-direct` (CLIENT INFO, asked on the same connection, says
// which one answered). Pipelined calls settle in order; a server killed mid-flight fails
// the calls in flight within the timeout and later calls reconnect; a reply later than
// QUOTA_STORE_REDIS_TIMEOUT_MS fails with the timeout's error; a worker thread has its own
// connection; a process holding one exits by itself.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { Worker } from 'node:worker_threads'
import { createRequire } from 'node:module'
import async_hooks from 'node:async_hooks'
import { REDIS_SKIP, startRedis } from './support/redis-server.mjs'
import { useRedisServer, server, plain, stopped } from './support/redis-engine.mjs'
import { RedisQuotaStore, getRedisClient, resetRedisClient } from '@omniroute/quota-engine/compat/redisQuotaStore'
import { WINDOW_MS } from '@omniroute/quota-engine'

const require = createRequire(import.meta.url)
const skip = REDIS_SKIP
useRedisServer({ warn() {}, info() {}, debug() {} })

/** Whether `client`'s next command is answered on the direct connection. */
async function direct(client) {
  return /name=quota-engine-direct/.test(await client.call('CLIENT', 'INFO'))
}

async function until(check, what) {
  const deadline = Date.now() + 10_000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

test('commands go out on the direct connection once it is up; pipelined calls settle in order', { skip }, async () => {
  const client = await getRedisClient(server.url)
  await until(() => direct(client), 'the direct connection')
  const clients = await plain.client('LIST')
  assert.equal(clients.match(/name=quota-engine-direct/g).length, 1, 'one direct connection for this thread')
  // 500 calls in flight at once, not awaited one by one: each INCR's reply is its own.
  const replies = await Promise.all(Array.from({ length: 500 }, () => client.call('INCR', 'direct:order')))
  assert.deepEqual(replies, Array.from({ length: 500 }, (_, i) => i + 1))
  // Mixed replies (status, bulk, nil, array, error) keep their order too.
  const mixed = await Promise.allSettled([
    client.call('SET', 'direct:a', 'x'),
    client.call('GET', 'direct:a'),
    client.call('GET', 'direct:none'),
    client.mget('direct:a', 'direct:none'),
    client.call('HGET', 'direct:a', 'f'), // WRONGTYPE
    client.ping(),
  ])
  assert.deepEqual(mixed.slice(0, 4).map((r) => r.value), ['OK', 'x', null, ['x', null]])
  assert.equal(mixed[4].status, 'rejected')
  assert.equal(mixed[4].reason.code, 'ERR_QUOTA_STORE')
  assert.match(mixed[4].reason.message, /WRONGTYPE/)
  assert.equal(mixed[5].value, 'PONG')
  assert.ok(await direct(client), 'still direct after a server error')
})

test('a command sent on the direct connection runs no callback scope during the call', { skip }, async () => {
  // Settling opens a callback scope, which async hooks see as before/after; a send that
  // settles nothing must open none inside the caller's synchronous code.
  const client = await getRedisClient(server.url)
  await until(() => direct(client), 'the direct connection')
  const seen = []
  const hook = async_hooks.createHook({ before: (id) => seen.push(`before ${id}`), after: (id) => seen.push(`after ${id}`) })
  hook.enable()
  const sent = [client.call('PING'), client.call('PING'), client.call('PING')]
  hook.disable()
  assert.deepEqual(seen, [])
  assert.deepEqual(await Promise.all(sent), ['PONG', 'PONG', 'PONG'])
  assert.ok(await direct(client), 'they went out direct')
})

test('QUOTA_STORE_REDIS_DIRECT=0: every command on the shared connection', { skip }, async () => {
  const client = await getRedisClient(server.url)
  await until(() => direct(client), 'the direct connection')
  process.env.QUOTA_STORE_REDIS_DIRECT = '0'
  try {
    for (let i = 0; i < 5; i++) assert.equal(await direct(client), false)
  } finally {
    delete process.env.QUOTA_STORE_REDIS_DIRECT
  }
  assert.ok(await direct(client), 'and direct again once it is 1')
})

test('peek\'s read goes out on the direct connection; a server without the script is loaded the shared way', { skip }, async () => {
  process.env.QUOTA_STORE_REDIS_VIEW_MS = '0' // every peek reads
  try {
    const client = await getRedisClient(server.url)
    await until(() => direct(client), 'the direct connection')
    const store = new RedisQuotaStore(server.url)
    const dim = { poolId: 'direct-pool', unit: 'requests', window: 'hourly' }
    const bucket = Math.floor(Date.now() / WINDOW_MS.hourly)
    await plain.set(`omniroute:quota:dk:direct-pool:requests:hourly:${bucket}`, '6')
    const lastOnDirect = async () => (await plain.client('LIST')).split('\n').find((l) => /name=quota-engine-direct/.test(l)).match(/ cmd=(\S+)/)[1]
    await plain.script('FLUSH')
    assert.equal(await store.peek('dk', dim), 6, 'NOSCRIPT on the direct connection: loaded and read on the shared one')
    assert.equal(await client.ping(), 'PONG')
    assert.equal(await lastOnDirect(), 'ping')
    const values = await Promise.all(Array.from({ length: 20 }, () => store.peek('dk', dim)))
    assert.deepEqual(values, Array(20).fill(6))
    assert.equal(await lastOnDirect(), 'evalsha', 'the reads went out on the direct connection')
  } finally {
    delete process.env.QUOTA_STORE_REDIS_VIEW_MS
  }
})

test('a server killed mid-flight: calls in flight fail within the timeout, later calls reconnect', { skip }, async () => {
  const flaky = await startRedis()
  stopped.push(flaky)
  const client = await getRedisClient(flaky.url)
  await until(() => direct(client), 'the direct connection')
  // A blocking pop holds the connection: the calls behind it are in flight when it dies.
  const inFlight = Promise.allSettled([client.call('BLPOP', 'direct:never', '5'), client.call('GET', 'direct:k'), client.ping()])
  await new Promise((resolve) => setTimeout(resolve, 50))
  const started = Date.now()
  await flaky.kill('SIGKILL')
  const settled = await inFlight
  const took = Date.now() - started
  for (const r of settled) {
    assert.equal(r.status, 'rejected')
    assert.equal(r.reason.code, 'ERR_QUOTA_REDIS_UNAVAILABLE', r.reason.message)
  }
  assert.ok(took < 3000, `took ${took} ms`)
  await assert.rejects(client.ping(), (e) => e.code === 'ERR_QUOTA_REDIS_UNAVAILABLE')
  await flaky.start() // same port, empty
  await until(async () => (await client.ping().catch(() => null)) === 'PONG', 'a PING after the restart')
  await until(() => direct(client), 'the direct connection again')
  assert.equal(await client.call('INCR', 'direct:after'), 1)
})

test('no reply within QUOTA_STORE_REDIS_TIMEOUT_MS: the calls in flight fail with the timeout, the next calls work', { skip }, async () => {
  process.env.QUOTA_STORE_REDIS_TIMEOUT_MS = '300' // read when the URL's backend is created
  let client
  try {
    client = await getRedisClient(`${server.url}#direct-timeout`)
  } finally {
    delete process.env.QUOTA_STORE_REDIS_TIMEOUT_MS
  }
  await until(() => direct(client), 'the direct connection')
  const started = Date.now()
  const calls = [client.call('BLPOP', 'direct:none', '1'), client.ping()]
  const settled = await Promise.allSettled(calls)
  const took = Date.now() - started
  for (const r of settled) {
    assert.equal(r.status, 'rejected')
    assert.equal(r.reason.code, 'ERR_QUOTA_REDIS_UNAVAILABLE')
    assert.match(r.reason.message, /did not answer within 300 ms/)
  }
  assert.ok(took >= 250 && took < 2000, `took ${took} ms`)
  await new Promise((resolve) => setTimeout(resolve, 800)) // the server wakes up
  assert.equal(await client.ping(), 'PONG')
  await until(() => direct(client), 'a new direct connection')
})

test('a worker thread has its own direct connection', { skip }, async () => {
  const client = await getRedisClient(server.url)
  await until(() => direct(client), 'the direct connection')
  const mainId = await client.call('CLIENT', 'ID')
  const source = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { getRedisClient } = require(workerData.entry)
    ;(async () => {
      const client = await getRedisClient(workerData.url)
      let info = ''
      for (let i = 0; i < 2000 && !/name=quota-engine-direct/.test(info); i++) {
        info = await client.call('CLIENT', 'INFO')
        await new Promise((r) => setTimeout(r, 2))
      }
      const ids = await Promise.all(Array.from({ length: 50 }, () => client.call('CLIENT', 'ID')))
      parentPort.postMessage({ info, ids })
    })()
  `
  const worker = new Worker(source, { eval: true, workerData: { entry: require.resolve('@omniroute/quota-engine'), url: server.url } })
  const { info, ids } = await new Promise((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  assert.match(info, /name=quota-engine-direct/)
  assert.equal(new Set(ids).size, 1, 'one connection')
  assert.notEqual(ids[0], mainId, 'not the main thread\'s')
  assert.equal(await new Promise((resolve) => worker.once('exit', resolve)), 0, 'the worker ends by itself')
  assert.ok(await direct(client), 'the main thread\'s connection is unaffected')
})

test('a process holding a direct connection exits by itself', { skip }, () => {
  const script = `
    const { getRedisClient } = require(${JSON.stringify(require.resolve('@omniroute/quota-engine'))})
    ;(async () => {
      const client = await getRedisClient(${JSON.stringify(server.url)})
      for (let i = 0; i < 2000; i++) {
        if (/name=quota-engine-direct/.test(await client.call('CLIENT', 'INFO'))) { console.log('DIRECT'); return }
        await new Promise((r) => setTimeout(r, 2))
      }
    })()
  `
  const started = Date.now()
  const run = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 10_000 })
  assert.equal(run.status, 0, run.stderr)
  assert.equal(run.stdout.trim(), 'DIRECT')
  assert.ok(Date.now() - started < 5000)
})

test('resetRedisClient() closes this thread\'s direct connections', { skip }, async () => {
  const client = await getRedisClient(server.url)
  await until(() => direct(client), 'the direct connection')
  resetRedisClient()
  await until(async () => !/name=quota-engine-direct/.test(await plain.client('LIST')), 'the direct connection to close')
  const again = await getRedisClient(server.url)
  assert.equal(await again.ping(), 'PONG')
  await until(() => direct(again), 'a new direct connection')
})

test('another thread resets the client while this thread has reads in flight: they are sent again the shared way, later calls get a new connection', { skip }, async () => {
  const client = await getRedisClient(server.url)
  await until(() => direct(client), 'the direct connection')
  // Paused, the server holds the replies: the reads are in flight on the direct connection.
  await plain.call('CLIENT', 'PAUSE', '300', 'ALL')
  const inFlight = Promise.all([client.ping(), client.call('GET', 'direct:reset')])
  const worker = new Worker(
    `const { workerData } = require('node:worker_threads')
     require(workerData.entry).resetRedisClient()`,
    { eval: true, workerData: { entry: require.resolve('@omniroute/quota-engine/compat/redisQuotaStore') } },
  )
  assert.equal(await new Promise((resolve) => worker.once('exit', resolve)), 0)
  // This thread's next call finds the URL's backend replaced: the old link closes and its
  // reads go again on the shared connection (before the fix: a RefCell panic, and Node aborted).
  const next = await getRedisClient(server.url)
  const after = next.ping()
  assert.deepEqual(await inFlight, ['PONG', null])
  assert.equal(await after, 'PONG')
  await until(() => direct(next), 'a new direct connection')
})
