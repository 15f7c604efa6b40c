// A careless or hostile caller of the glue: values thrown without any text, a logger whose
// method is a throwing getter, an async event listener that rejects, the spend recorder's
// optional arguments left null, a dbPath function or a logger that calls the engine. Each
// call keeps its promise (the hot path allows and resolves, nothing rejects unhandled) and the
// process keeps running; what went wrong is logged.
import { test, before, after, beforeEach } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'
import { enforceQuotaShare, recordConsumption } from '@omniroute/quota-engine/compat/enforce'
import { installHost } from '@omniroute/quota-engine/compat/host'
import { recordStreamingConsumption } from '@omniroute/quota-engine/compat/spendRecorder'
import { closeQuotaDb, createPool, upsertProviderPlan, flushQuotaWrites, getSaturation, registerSaturationFetcher, resolvePlan } from '@omniroute/quota-engine'

const binding = createRequire(import.meta.url)('../binding.js')
const { pendingQuotaWrites } = binding

const here = path.dirname(fileURLToPath(import.meta.url))
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-caller-'))
const warnings = []
const logger = { warn: (obj, msg) => warnings.push({ ...obj, msg }), info() {}, debug() {} }
let seq = 0

/** A database of its own for one test, installed with `host` options over the recording logger. */
function install(host = {}) {
  closeQuotaDb()
  const dir = path.join(root, `case-${++seq}`)
  fs.mkdirSync(dir)
  const dbPath = path.join(dir, 'storage.sqlite')
  installHost({ dbPath, logger, ...host })
  return { dir, dbPath }
}

/** A pool on `connectionId` whose one key may make `limit` requests an hour. */
function pool(connectionId, apiKeyId, limit = 1000) {
  upsertProviderPlan({ connectionId, provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit }], source: 'manual' })
  createPool({ connectionId, name: connectionId, allocations: [{ apiKeyId, weight: 100 }] })
}

/** Runs `fn(written)` with process.stderr's writes collected instead of written; what was written. */
async function capturingStderr(fn) {
  const lines = []
  const written = () => lines.join('')
  const write = process.stderr.write
  process.stderr.write = (chunk) => lines.push(String(chunk)) > 0
  try {
    await fn(written)
  } finally {
    process.stderr.write = write
  }
  return written()
}

/** Waits up to 5 s for `done()`. */
async function until(done) {
  for (let waited = 0; !done() && waited < 5000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10))
}

before(() => install())
beforeEach(() => {
  warnings.length = 0
})
after(() => {
  closeQuotaDb()
  fs.rmSync(root, { recursive: true, force: true })
})

test('a value thrown with no text (a getter throwing Object.create(null)): enforce allows, record resolves, each warns', async () => {
  install()
  pool('c-thrown', 'k-thrown')
  const noText = () => Object.create(null)
  const decision = await enforceQuotaShare({ get apiKeyId() { throw noText() }, connectionId: 'c-thrown', provider: 'kimi' })
  assert.deepEqual(decision, { kind: 'allow' })
  await recordConsumption({ apiKeyId: 'k-thrown', connectionId: 'c-thrown', provider: 'kimi', get cost() { throw noText() } })
  const said = warnings.map((w) => w.msg)
  assert.ok(said.some((m) => m.startsWith('quota enforcement failed; allowing the request')), said.join(' | '))
  assert.ok(said.some((m) => m.startsWith('recording quota consumption failed')), said.join(' | '))
})

const getterLogger = { get warn() { throw new Error('the logger getter threw') }, info() {}, debug() {} }

test('a logger whose warn is a throwing getter: enforce still decides, and the warning goes to stderr instead', async () => {
  install({ logger: getterLogger })
  pool('c-getter', 'k-getter')
  const before = process.env.QUOTA_SATURATION_THRESHOLD
  const stderr = await capturingStderr(async () => {
    process.env.QUOTA_SATURATION_THRESHOLD = 'not-a-number' // a warning, logged once, at the next decision
    try {
      assert.equal((await enforceQuotaShare({ apiKeyId: 'k-getter', connectionId: 'c-getter', provider: 'kimi' })).kind, 'allow')
    } finally {
      if (before === undefined) delete process.env.QUOTA_SATURATION_THRESHOLD
      else process.env.QUOTA_SATURATION_THRESHOLD = before
    }
  })
  assert.match(stderr, /"level":"warn".*QUOTA_SATURATION_THRESHOLD/)
  install()
})

test('a logger whose warn is a throwing getter: the flush timer says on stderr what its commit found, and goes on', async () => {
  const { dir } = install({ logger: getterLogger })
  pool('c-timer', 'k-timer')
  // Which one it says depends on when it finds the folder gone; either is a timer's warning.
  const failed = /"level":"warn".*(committing buffered quota records failed|the database file was deleted or renamed away)/
  const stderr = await capturingStderr(async (written) => {
    // A record left for the timer, its file's folder replaced by a file: the timer's commit
    // warns through the logger (before, the getter's throw escaped the timer).
    await recordConsumption({ apiKeyId: 'k-timer', connectionId: 'c-timer', provider: 'kimi', cost: {} })
    fs.rmSync(dir, { recursive: true, force: true })
    fs.writeFileSync(dir, 'not a folder')
    await until(() => failed.test(written()))
    // The folder back: the timer's next try commits the record.
    fs.rmSync(dir)
    await until(() => pendingQuotaWrites() === 0)
  })
  assert.match(stderr, failed)
  assert.equal(pendingQuotaWrites(), 0, 'the timer committed the record once it could')
  install()
})

test('a scheduled commit that throws (a fault of the engine itself) is said once and retried, not an uncaught exception', async () => {
  install()
  pool('c-throws', 'k-throws')
  const original = binding.flushDueQuotaWrites
  let calls = 0
  binding.flushDueQuotaWrites = () => {
    calls++
    throw new Error('the engine threw')
  }
  try {
    await recordConsumption({ apiKeyId: 'k-throws', connectionId: 'c-throws', provider: 'kimi', cost: {} })
    await until(() => calls >= 2) // the first timer and its retry a second later
  } finally {
    binding.flushDueQuotaWrites = original
  }
  assert.ok(calls >= 2)
  await until(() => pendingQuotaWrites() === 0)
  assert.equal(pendingQuotaWrites(), 0, 'the next retry committed the record')
  const said = warnings.filter((w) => w.msg.startsWith('the scheduled commit of buffered quota records failed'))
  assert.deepEqual(said.map((w) => w.error), ['the engine threw'])
})

test('an async quota event listener that rejects: its rejection is logged as a throw, not left unhandled', async () => {
  install({ onQuotaEvent: async () => { throw new Error('the listener failed') } })
  pool('c-listener', 'k-listener', 1)
  await recordConsumption({ apiKeyId: 'k-listener', connectionId: 'c-listener', provider: 'kimi', cost: {} })
  const decision = await enforceQuotaShare({ apiKeyId: 'k-listener', connectionId: 'c-listener', provider: 'kimi' })
  assert.equal(decision.kind, 'block')
  await new Promise((resolve) => setImmediate(resolve))
  const threw = warnings.filter((w) => w.msg === 'quota event listener threw')
  assert.deepEqual(threw.map((w) => w.error), ['the listener failed'])
})

test('recordStreamingConsumption never rejects: deps null, or a log and a schedule that throw', async () => {
  install()
  const params = { apiKeyId: 'k-stream', connectionId: 'c-stream', model: 'm', streamUsage: {}, streamStatus: 200 }
  for (const streamStatus of [200, 500]) assert.equal(await recordStreamingConsumption({ ...params, streamStatus }, null), undefined)
  await new Promise((resolve) => setImmediate(resolve)) // the scheduled record ran
  const deps = {
    calculateCost: async () => 0,
    schedule: () => {
      throw new Error('the schedule threw')
    },
    log: {
      warn: () => {
        throw new Error('the log threw')
      },
    },
  }
  assert.equal(await recordStreamingConsumption(params, deps), undefined)
  const failed = warnings.filter((w) => w.msg === 'streaming quota record failed')
  assert.deepEqual(failed.map((w) => w.err), ['the schedule threw'])
  // deps whose log is a throwing getter, and deps that are a revoked Proxy.
  const throwingLog = {
    calculateCost: async () => 0,
    schedule: () => {
      throw new Error('the schedule threw again')
    },
    get log() {
      throw new Error('the log getter threw')
    },
  }
  const revoked = Proxy.revocable({}, {})
  revoked.revoke()
  for (const bad of [throwingLog, revoked.proxy]) assert.equal(await recordStreamingConsumption(params, bad), undefined)
  assert.equal(warnings.filter((w) => w.msg === 'streaming quota record failed').length, 3)
})

test('getSaturation answers 0 for a dim it cannot read (a throwing getter, a revoked Proxy), and says why', async () => {
  install()
  const revoked = Proxy.revocable({}, {})
  revoked.revoke()
  const dims = [
    {
      get unit() {
        throw new Error('the unit getter threw')
      },
      window: '5h',
    },
    revoked.proxy,
  ]
  for (const dim of dims) assert.equal(await getSaturation('c-sat', 'kimi', dim), 0)
  const failed = warnings.filter((w) => w.msg === 'saturation lookup failed; treating as 0')
  assert.equal(failed.length, 2, JSON.stringify(warnings))
  assert.match(failed[0].error, /the unit getter threw/)
})

test('installHost with a dbPath it refuses keeps the logger installed before', async () => {
  install()
  const stray = []
  const other = { warn: (_obj, msg) => stray.push(msg), info() {}, debug() {} }
  assert.throws(() => installHost({ dbPath: 42, logger: other }), { code: 'ERR_QUOTA_INVALID_ARG' })
  warnings.length = 0
  const unreadable = {
    get unit() {
      throw new Error('unreadable')
    },
  }
  assert.equal(await getSaturation('c-keep', 'kimi', unreadable), 0)
  assert.deepEqual(stray, [])
  assert.equal(warnings.filter((w) => w.msg === 'saturation lookup failed; treating as 0').length, 1)
})

test('installHost with an option whose getter throws changes nothing: logger, fetchers and path stay', async () => {
  install()
  registerSaturationFetcher('kept-sat', async () => 0.25)
  const stray = []
  const options = {
    dbPath: path.join(root, 'never.sqlite'),
    logger: { warn: (_obj, msg) => stray.push(msg), info() {}, debug() {} },
    get saturationFetchers() {
      throw new Error('the fetchers getter threw')
    },
  }
  assert.throws(() => installHost(options), /the fetchers getter threw/)
  assert.equal(await getSaturation('c-kept', 'kept-sat', { unit: 'percent', window: '5h' }), 0.25, 'the fetcher stays')
  warnings.length = 0
  assert.equal(await getSaturation('c-kept', 'kimi', { get unit() { throw new Error('unreadable') } }), 0)
  assert.deepEqual(stray, [])
  assert.equal(warnings.length, 1, 'the logger stays')
  closeQuotaDb()
  upsertProviderPlan({ connectionId: 'c-kept', provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit: 10 }], source: 'manual' })
  assert.equal(fs.existsSync(options.dbPath), false, 'the path stays')
  install()
})

test('a logger, listener or fetcher of the wrong type is the field\'s TypeError, and nothing changes', async () => {
  install()
  registerSaturationFetcher('typed-sat', async () => 0.75)
  const lookup = () => getSaturation('c-typed', 'typed-sat', { unit: 'percent', window: '5h' })
  assert.equal(await lookup(), 0.75)
  const stray = []
  const other = { warn: (_obj, msg) => stray.push(msg), info() {}, debug() {} }
  const dbPath = path.join(root, 'never-typed.sqlite')
  const wrong = (message) => ({ name: 'TypeError', code: 'ERR_QUOTA_INVALID_ARG', message })
  // Each option of the wrong type refuses the whole call, before the others are applied.
  for (const [options, message] of [
    [{ logger: 42 }, 'options.logger: expected an object, got number'],
    [{ onQuotaEvent: 'send' }, 'options.onQuotaEvent: expected a function, got string'],
    [{ registerDbStateResetter: {} }, 'options.registerDbStateResetter: expected a function, got object'],
    [{ saturationFetchers: 'codex' }, 'options.saturationFetchers: expected an object, got string'],
    [{ saturationFetchers: { codex: async () => 1, 'typed-sat': { fetch() {} } } }, 'options.saturationFetchers.typed-sat: expected a function, got object'],
  ]) {
    assert.throws(() => installHost({ dbPath, logger: other, ...options }), wrong(message))
  }
  assert.throws(() => registerSaturationFetcher('typed-sat', 'not a function'), wrong('fetcher: expected a function, got string'))
  const { setLogger, setQuotaEventListener } = await import('@omniroute/quota-engine')
  assert.throws(() => setLogger(42), wrong('logger: expected an object, got number'))
  assert.throws(() => setQuotaEventListener(42), wrong('listener: expected a function, got number'))
  // The fetcher, the logger and the path are the ones installed before.
  assert.equal(await lookup(), 0.75)
  warnings.length = 0
  assert.equal(await getSaturation('c-typed', 'kimi', { get unit() { throw new Error('unreadable') } }), 0)
  assert.deepEqual(stray, [])
  assert.equal(warnings.length, 1)
  upsertProviderPlan({ connectionId: 'c-typed', provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit: 10 }], source: 'manual' })
  assert.equal(fs.existsSync(dbPath), false)
  // `null` is none: the fetcher is removed (asked on a connection not cached yet).
  registerSaturationFetcher('typed-sat', null)
  assert.equal(await getSaturation('c-typed-after', 'typed-sat', { unit: 'percent', window: '5h' }), 0)
})

test('a call keeps its own answer when handing over its warnings fails (no logger, a stderr that throws)', () => {
  install()
  installHost({ dbPath: () => { throw new Error('no path yet') } })
  closeQuotaDb()
  const write = process.stderr.write
  process.stderr.write = () => {
    throw new Error('stderr closed')
  }
  let plan
  try {
    plan = resolvePlan('c-stderr', 'kimi')
  } finally {
    process.stderr.write = write
  }
  assert.equal(plan.provider, 'kimi', JSON.stringify(plan))
  install()
})

test('a logger that calls the engine gets the records in the order the engine made them', () => {
  const { dbPath } = install()
  let problem = null
  const said = []
  const calling = {
    warn(_fields, msg) {
      said.push(msg)
      if (msg.startsWith('glue fault one')) {
        // Handling the first of two records, the logger calls the engine, which logs again.
        problem = 'nested problem'
        closeQuotaDb()
        resolvePlan('c-logger-order', 'kimi')
        problem = null
      }
    },
    info() {},
    debug() {},
  }
  installHost({ logger: calling, dbPath: () => { if (problem) throw new Error(problem); return dbPath } })
  // Two records waiting (one fault of each operation: each is said once until it recovers).
  binding.failOpen('record', 'glue fault one', 'e1')
  binding.failOpen('enforce', 'glue fault two', 'e2')
  resolvePlan('c-logger-order', 'kimi') // hands both over
  assert.equal(said.length, 3, said.join('\n'))
  assert.match(said[0], /^glue fault one/)
  assert.match(said[1], /^glue fault two/)
  assert.match(said[2], /threw: .*nested problem/)
  install()
})

test('a logger that makes the engine log on every record it handles does not keep a hand-over going', () => {
  install()
  const glue = createRequire(import.meta.url)('../lib/host.js')
  let handled = 0
  glue.setLogger({
    warn() {
      handled++
      glue.forwardLogs([{ level: 'warn', component: 'quota:store', msg: 'again', fields: {} }])
    },
  })
  glue.forwardLogs([{ level: 'warn', component: 'quota:store', msg: 'first', fields: {} }])
  assert.equal(handled, 1000, 'one hand-over delivers at most 1000 records')
  // What is left goes at the next hand-over, even one that brings nothing new.
  const later = []
  glue.setLogger({ warn: (_fields, msg) => later.push(msg) })
  glue.drainLogs()
  assert.deepEqual(later, ['again'])
  glue.setLogger(null)
  install()
})

test('a quota event listener that throws, with no logger and a stderr that throws: a block stays a block, and a rejection is not left unhandled', async () => {
  const unhandled = []
  const onUnhandled = (reason) => unhandled.push(reason)
  process.on('unhandledRejection', onUnhandled)
  const write = process.stderr.write
  try {
    for (const [i, listener] of [() => { throw new Error('listener failed') }, async () => { throw new Error('listener failed') }].entries()) {
      const { dbPath } = install()
      installHost({ dbPath, logger: null, onQuotaEvent: listener })
      pool(`c-listener-${i}`, `k-listener-${i}`, 1)
      const request = { apiKeyId: `k-listener-${i}`, connectionId: `c-listener-${i}`, provider: 'kimi' }
      await recordConsumption({ ...request, cost: {} })
      process.stderr.write = () => {
        throw new Error('stderr closed')
      }
      const decision = await enforceQuotaShare(request)
      await new Promise((resolve) => setTimeout(resolve, 20))
      process.stderr.write = write
      assert.equal(decision.kind, 'block', JSON.stringify(decision))
    }
  } finally {
    process.stderr.write = write
    process.off('unhandledRejection', onUnhandled)
    install()
  }
  assert.deepEqual(unhandled, [])
})

test('a logger that ends the process while it handles a record still gets what the engine logs at exit', () => {
  const dir = fs.mkdtempSync(path.join(root, 'exit-in-logger-'))
  const script = `
    const fs = require('node:fs')
    const qe = require(${JSON.stringify(path.join(here, '..', 'index.js'))})
    const { recordConsumption } = require(${JSON.stringify(path.join(here, '..', 'compat', 'enforce.js'))})
    const glue = require(${JSON.stringify(path.join(here, '..', 'lib', 'host.js'))})
    const dir = ${JSON.stringify(path.join(dir, 'data'))}
    fs.mkdirSync(dir)
    const logger = { warn: (obj, msg) => { console.log('warn:', msg); if (msg === 'leaving') process.exit(0) }, info() {}, debug() {} }
    qe.installHost({ dbPath: () => dir + '/storage.sqlite', logger })
    qe.upsertProviderPlan({ connectionId: 'c', provider: 'kimi', dimensions: [{ unit: 'requests', window: 'hourly', limit: 10 }], source: 'manual' })
    qe.createPool({ connectionId: 'c', name: 'n', allocations: [{ apiKeyId: 'k', weight: 100 }] })
    recordConsumption({ apiKeyId: 'k', connectionId: 'c', provider: 'kimi', cost: {} }).then(() => {
      // The commit at exit cannot reach the file: its directory is gone.
      fs.rmSync(dir, { recursive: true, force: true })
      glue.forwardLogs([{ level: 'warn', component: 'quota:store', msg: 'leaving', fields: {} }])
    })
  `
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 30_000 })
  assert.equal(child.status, 0, child.stderr)
  assert.match(child.stdout, /warn: leaving\n/)
  assert.match(child.stdout, /warn: .*quota records were buffered/, child.stdout)
})

test('a saturation fetcher that asks for its own entry joins the fetch under way instead of starting another', async () => {
  install()
  let calls = 0
  registerSaturationFetcher('reentrant-sat', (connectionId, dim) => {
    calls++
    getSaturation(connectionId, 'reentrant-sat', dim).catch(() => {})
    return Promise.resolve(0.9)
  })
  assert.equal(await getSaturation('c-reentrant', 'reentrant-sat', { unit: 'percent', window: '5h' }), 0.9)
  assert.equal(calls, 1)
  assert.deepEqual(warnings.filter((w) => /saturation/.test(w.msg)), [])
})

test('a dbPath function that calls the engine: the inner call is refused and warned about, not a recursion that crashes the process', () => {
  const dir = fs.mkdtempSync(path.join(root, 'reentrant-'))
  const script = `
    const qe = require(${JSON.stringify(path.join(here, '..', 'index.js'))})
    const { enforceQuotaShare } = require(${JSON.stringify(path.join(here, '..', 'compat', 'enforce.js'))})
    const file = ${JSON.stringify(path.join(dir, 'chosen.sqlite'))}
    const logger = { warn: (obj, msg) => console.log('warn:', msg), info() {}, debug() {} }
    qe.installHost({ dbPath: () => { qe.getPool('any'); return file }, logger })
    qe.createPool({ connectionId: 'c', name: 'n', allocations: [{ apiKeyId: 'k', weight: 100 }] })
    enforceQuotaShare({ apiKeyId: 'k', connectionId: 'c', provider: 'kimi' }).then((d) => console.log('decision:', d.kind))
  `
  const child = spawnSync(process.execPath, ['-e', script], { env: { ...process.env, DATA_DIR: dir }, encoding: 'utf8', timeout: 30_000 })
  assert.equal(child.signal, null, `killed by ${child.signal}: ${child.stderr}`)
  assert.equal(child.status, 0, child.stderr)
  assert.match(child.stdout, /warn: installHost dbPath resolver called the engine from inside itself; using /)
  assert.match(child.stdout, /decision: allow/)
})

test('flushQuotaWrites after the cases: nothing is left buffered', () => {
  assert.equal(flushQuotaWrites(), null)
})
