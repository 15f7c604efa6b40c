// The quota-share backlog queue (docs/contract.md §10) through the host's import path. Timeouts
// run on node:test's mocked timers, so no case waits on the clock or depends on speed.
import { test, mock, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import {
  quotaShareConcurrencyKey,
  acquireQuotaShareConcurrencySlot as acquire,
} from '@omniroute/quota-engine/compat/quotaShareConcurrency'

let connectionCounter = 0
/** A target on a connection no other case uses (the queue's state is per process). */
const freshTarget = () => ({ executionKey: 'x', connectionId: `conn-${++connectionCounter}` })

/** A logger that records its warn calls. */
function recorder() {
  const warns = []
  return { warns, warn: (...args) => warns.push(args) }
}

/** Lets every already-resolved promise callback run. */
const settle = () => new Promise((resolve) => setImmediate(resolve))

/** Tracks whether a promise has settled yet. */
function watch(promise) {
  const state = { done: false, value: undefined }
  promise.then((value) => Object.assign(state, { done: true, value }))
  return state
}

const OPTS = { queueTimeoutMs: 60_000, maxQueueSize: 10 }

afterEach(() => mock.timers.reset())

test('quotaShareConcurrencyKey is "qsconn:<id>"', () => {
  assert.equal(quotaShareConcurrencyKey('abc'), 'qsconn:abc')
})

test('no connection, or a cap null or <= 0, resolves to null at once without a warning', async () => {
  const log = recorder()
  assert.equal(await acquire({ executionKey: 'x' }, 2, OPTS, log), null)
  assert.equal(await acquire({ connectionId: '' }, 2, OPTS, log), null)
  assert.equal(await acquire(null, 2, OPTS, log), null)
  for (const cap of [null, undefined, 0, -1, NaN]) {
    assert.equal(await acquire(freshTarget(), cap, OPTS, log), null, String(cap))
  }
  assert.equal(log.warns.length, 0)
})

test('it returns a promise (async), even when a slot is free', () => {
  const pending = acquire(freshTarget(), 1, OPTS, recorder())
  assert.ok(pending instanceof Promise)
  return pending.then((release) => release())
})

test('cap 1 serialises: the second caller waits until the first releases', async () => {
  const target = freshTarget()
  const release1 = await acquire(target, 1, OPTS, recorder())
  assert.equal(typeof release1, 'function')
  const second = watch(acquire(target, 1, OPTS, recorder()))
  await settle()
  assert.equal(second.done, false, 'waiting while the slot is held')
  release1()
  await settle()
  assert.equal(second.done, true)
  assert.equal(typeof second.value, 'function')
  second.value()
})

test('cap 2 lets two in at once and queues the third', async () => {
  const target = freshTarget()
  const a = await acquire(target, 2, OPTS, recorder())
  const b = await acquire(target, 2, OPTS, recorder())
  assert.equal(typeof a, 'function')
  assert.equal(typeof b, 'function')
  const third = watch(acquire(target, 2, OPTS, recorder()))
  await settle()
  assert.equal(third.done, false)
  b()
  await settle()
  assert.equal(typeof third.value, 'function')
  a()
  third.value()
})

test('waiters are served first in, first out', async () => {
  const target = freshTarget()
  const order = []
  let release = await acquire(target, 1, OPTS, recorder())
  const waiters = ['w1', 'w2', 'w3'].map((name) =>
    acquire(target, 1, OPTS, recorder()).then((slot) => {
      order.push(name)
      return slot
    }),
  )
  for (const waiter of waiters) {
    release()
    release = await waiter
  }
  release()
  assert.deepEqual(order, ['w1', 'w2', 'w3'])
})

test('a newcomer queues behind the waiters even when a slot frees', async () => {
  const target = freshTarget()
  const release = await acquire(target, 1, OPTS, recorder())
  const waiter = watch(acquire(target, 1, OPTS, recorder()))
  release()
  const newcomer = watch(acquire(target, 1, OPTS, recorder()))
  await settle()
  assert.equal(typeof waiter.value, 'function', 'the slot went to the waiter')
  assert.equal(newcomer.done, false)
  waiter.value()
  await settle()
  assert.equal(typeof newcomer.value, 'function')
  newcomer.value()
})

test('a timeout fails open: null and one log.warn; a queueTimeoutMs not given is 30 s, the host\'s semaphore\'s default', async () => {
  mock.timers.enable({ apis: ['setTimeout'] })
  for (const [options, waits] of [[{ queueTimeoutMs: 50, maxQueueSize: 10 }, 50], [{ maxQueueSize: 10 }, 30_000]]) {
    const target = freshTarget()
    const release = await acquire(target, 1, OPTS, recorder())
    const log = recorder()
    const waiter = watch(acquire(target, 1, options, log))
    mock.timers.tick(waits - 1)
    await settle()
    assert.equal(waiter.done, false)
    mock.timers.tick(1)
    await settle()
    assert.equal(waiter.done, true)
    assert.equal(waiter.value, null)
    // As the host's module called its combo logger: a tag, then the text.
    const text = `Quota-share concurrency: connection ${target.connectionId} gate saturated (cap=1, waited ${waits} ms) — proceeding without a slot`
    assert.deepEqual(log.warns, [['COMBO', text]])
    release()
  }
})

test('a queue timeout past setTimeout\'s range (2^31 ms and more) waits, not 1 ms', async () => {
  // Real timers: Node runs a longer delay after 1 ms (with a TimeoutOverflowWarning).
  const warnings = []
  const onWarning = (warning) => warnings.push(warning.name)
  process.on('warning', onWarning)
  try {
    for (const queueTimeoutMs of [2 ** 31, Number.MAX_VALUE]) {
      const target = freshTarget()
      const release = await acquire(target, 1, OPTS, recorder())
      const log = recorder()
      const waiter = watch(acquire(target, 1, { queueTimeoutMs, maxQueueSize: 10 }, log))
      await new Promise((resolve) => setTimeout(resolve, 30))
      assert.equal(waiter.done, false, `${queueTimeoutMs}: still waiting`)
      release()
      await settle()
      assert.equal(typeof waiter.value, 'function', `${queueTimeoutMs}: the slot, handed over`)
      waiter.value()
      assert.equal(log.warns.length, 0)
    }
    assert.deepEqual(warnings, [])
  } finally {
    process.off('warning', onWarning)
  }
})

test('a full queue fails open at once: null and one log.warn', async () => {
  const target = freshTarget()
  const release = await acquire(target, 1, OPTS, recorder())
  const queued = watch(acquire(target, 1, { queueTimeoutMs: 60_000, maxQueueSize: 1 }, recorder()))
  const log = recorder()
  assert.equal(await acquire(target, 1, { queueTimeoutMs: 60_000, maxQueueSize: 1 }, log), null)
  assert.equal(log.warns.length, 1)
  assert.deepEqual(log.warns[0], ['COMBO', `Quota-share concurrency: connection ${target.connectionId} gate saturated (cap=1, queue full at 1) — proceeding without a slot`])
  // maxQueueSize 0: nobody waits.
  const log0 = recorder()
  assert.equal(await acquire(target, 1, { queueTimeoutMs: 60_000, maxQueueSize: 0 }, log0), null)
  assert.equal(log0.warns.length, 1)
  release()
  await settle()
  assert.equal(typeof queued.value, 'function', 'the queued caller still gets its slot')
  queued.value()
})

test('connections are independent', async () => {
  const a = freshTarget()
  const b = freshTarget()
  const releaseA = await acquire(a, 1, OPTS, recorder())
  const log = recorder()
  const releaseB = await acquire(b, 1, { queueTimeoutMs: 60_000, maxQueueSize: 0 }, log)
  assert.equal(typeof releaseB, 'function', "b's slot is free while a's is held")
  assert.equal(log.warns.length, 0)
  releaseA()
  releaseB()
})

test('a waiter that timed out never holds a slot', async () => {
  mock.timers.enable({ apis: ['setTimeout'] })
  const target = freshTarget()
  const release = await acquire(target, 1, OPTS, recorder())
  const timedOut = watch(acquire(target, 1, { queueTimeoutMs: 20, maxQueueSize: 10 }, recorder()))
  mock.timers.tick(20)
  await settle()
  assert.equal(timedOut.value, null)
  release()
  // If the timed-out waiter had been handed the freed slot, nobody could take it now
  // without waiting (maxQueueSize 0 fails open at once instead).
  const log = recorder()
  const next = await acquire(target, 1, { queueTimeoutMs: 60_000, maxQueueSize: 0 }, log)
  assert.equal(typeof next, 'function')
  assert.equal(log.warns.length, 0)
  next()
})

test('the release function is idempotent', async () => {
  const target = freshTarget()
  const release = await acquire(target, 1, OPTS, recorder())
  const waiter = watch(acquire(target, 1, OPTS, recorder()))
  release()
  release()
  release()
  await settle()
  assert.equal(typeof waiter.value, 'function')
  // One slot, held by the waiter: the extra releases freed nothing more.
  const log = recorder()
  assert.equal(await acquire(target, 1, { queueTimeoutMs: 60_000, maxQueueSize: 0 }, log), null)
  assert.equal(log.warns.length, 1)
  waiter.value()
  waiter.value()
  const again = await acquire(target, 1, { queueTimeoutMs: 60_000, maxQueueSize: 0 }, recorder())
  assert.equal(typeof again, 'function')
  again()
})

test('it never rejects on a full queue or a timeout, even with a throwing logger', async () => {
  mock.timers.enable({ apis: ['setTimeout'] })
  const target = freshTarget()
  const release = await acquire(target, 1, OPTS, recorder())
  const throwing = { warn: () => { throw new Error('logger down') } }
  assert.equal(await acquire(target, 1, { queueTimeoutMs: 10, maxQueueSize: 0 }, throwing), null)
  const waiter = acquire(target, 1, { queueTimeoutMs: 10, maxQueueSize: 5 }, throwing)
  mock.timers.tick(10)
  assert.equal(await waiter, null)
  release()
})

test('bad argument types reject with TypeError/RangeError and ERR_QUOTA_INVALID_ARG', async () => {
  const cases = [
    [() => acquire(freshTarget(), '2', OPTS), TypeError, 'cap'],
    [() => acquire(freshTarget(), 2, 'fast'), TypeError, 'options'],
    [() => acquire(freshTarget(), 2, { queueTimeoutMs: '5', maxQueueSize: 1 }), TypeError, 'options.queueTimeoutMs'],
    [() => acquire(freshTarget(), 2, { queueTimeoutMs: 5, maxQueueSize: -1 }), RangeError, 'options.maxQueueSize'],
  ]
  for (const [call, ErrorClass, field] of cases) {
    await assert.rejects(call, (err) => err instanceof ErrorClass && err.code === 'ERR_QUOTA_INVALID_ARG' && err.message.startsWith(`${field}: `))
  }
})

test('a waiting caller does not keep the process alive', () => {
  // A child process leaves a caller waiting with an hour-long timeout and nothing else to
  // do: it must exit at once (a ref'd timer would hold it for the hour).
  const script = `
    const { acquireQuotaShareConcurrencySlot: acquire } = require('@omniroute/quota-engine/compat/quotaShareConcurrency')
    const target = { connectionId: 'held' }
    acquire(target, 1, { queueTimeoutMs: 3_600_000, maxQueueSize: 5 }).then(() => {
      acquire(target, 1, { queueTimeoutMs: 3_600_000, maxQueueSize: 5 }).then(() => process.exit(3))
      console.log('waiting')
    })
  `
  const child = spawnSync(process.execPath, ['-e', script], { cwd: new URL('..', import.meta.url), encoding: 'utf8', timeout: 120_000 })
  assert.equal(child.signal, null, 'exited by itself')
  assert.equal(child.status, 0, child.stderr)
  assert.equal(child.stdout.trim(), 'waiting')
})
