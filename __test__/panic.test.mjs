// No panic crosses into JavaScript (which would abort Node): the edge turns it into a JS
// Error with a stable code, and the process and the engine keep working afterwards —
// including after a panic inside a write transaction on the engine's one connection.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import { installHost } from '@omniroute/quota-engine/compat/host'
import { closeQuotaDb, getSqliteQuotaStore, decideFairShare, getBucket } from '@omniroute/quota-engine'
import { storeRateLimitHeaders, getTokenHeaderSaturation } from '@omniroute/quota-engine/compat/saturationSignals'

const require = createRequire(import.meta.url)
const native = require('../binding.js')

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-panic-'))
const HOUR = 3_600_000
const dim = { poolId: 'panic-pool', unit: 'requests', window: 'hourly' }

before(() => installHost({ dbPath: path.join(dir, 'storage.sqlite'), logger: { warn() {}, info() {}, debug() {} } }))
after(() => {
  closeQuotaDb()
  fs.rmSync(dir, { recursive: true, force: true })
})

test('a panic in a native function throws an Error with code GenericFailure (#[napi(catch_unwind)]), not an abort, and the engine keeps working', async () => {
  const store = getSqliteQuotaStore()
  assert.equal(await store.consume('panic-key', dim, 1), 1)
  assert.throws(() => native.__forcePanicForTests(), (err) => {
    assert.ok(err instanceof Error)
    assert.equal(err.code, 'GenericFailure')
    assert.match(err.message, /forced panic for tests/)
    return true
  })
  // Same process, same engine: the next calls work.
  assert.equal(await store.consume('panic-key', dim, 1), 2)
  assert.equal(decideFairShare({ dimensions: [], allocation: { weight: 1, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }).kind, 'allow')
})

test('a panic inside a write transaction: rolled back, the connection recovered, the next consume succeeds', async () => {
  const store = getSqliteQuotaStore()
  const before = await store.peek('tx-key', dim)
  // The hook adds 1 to tx-key's counter inside a write transaction, then panics while
  // holding the connection's mutex (poisoning it) with the transaction still open.
  assert.throws(() => native.__forcePanicForTests('store', 'tx-key', dim.poolId), { code: 'GenericFailure' })
  // The half-done write is gone, and the connection takes writes again.
  assert.equal(await store.peek('tx-key', dim), before)
  assert.equal(await store.consume('tx-key', dim, 1), before + 1)
  assert.equal(getBucket('tx-key', 'panic-pool:requests:hourly', Math.floor(Date.now() / HOUR)), before + 1)
  // Repeatedly: the recovery is not a one-off.
  for (let i = 0; i < 3; i++) assert.throws(() => native.__forcePanicForTests('store', 'tx-key', dim.poolId), { code: 'GenericFailure' })
  assert.equal(await store.consume('tx-key', dim, 1), before + 2)
})

test('hostile rate-limit headers neither panic nor throw (found by the fuzzer: reset overflow)', () => {
  // A reset of 10^20 hours or 10^21 seconds overflowed `now + duration` (a panic in debug
  // builds — an abort, from storeRateLimitHeaders — and a wrapped, negative reset in release
  // builds); past the Date range it now reads as unknown, so resetAt is null.
  storeRateLimitHeaders('hostile', 'openai', {
    'x-ratelimit-limit-tokens': '1000',
    'x-ratelimit-remaining-tokens': '250',
    'x-ratelimit-reset-tokens': '99999999999999999999h',
  })
  assert.deepEqual(getTokenHeaderSaturation('openai', 'hostile'), { saturation: 0.75, resetAt: null })
  storeRateLimitHeaders('hostile', 'anthropic', {
    'anthropic-ratelimit-tokens-limit': '1000',
    'anthropic-ratelimit-tokens-remaining': '0',
    'anthropic-ratelimit-tokens-reset': '999999999999999999999',
  })
  assert.deepEqual(getTokenHeaderSaturation('anthropic', 'hostile'), { saturation: 1, resetAt: null })
})

test('every native function of src/binding/ catches panics (a new one cannot forget it)', async () => {
  const fs = await import('node:fs')
  const path = await import('node:path')
  const dir = new URL('../src/binding/', import.meta.url)
  const missing = []
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.rs'))) {
    const source = fs.readFileSync(new URL(file, dir), 'utf8')
    // An attribute `#[napi…]` (possibly spanning lines), then the next item.
    for (const match of source.matchAll(/#\[napi(?:\((?:[^()]|\([^()]*\))*\))?\]\s*(?:#\[[^\]]*\]\s*|\/\/\/[^\n]*\n\s*)*(pub(?:\(crate\))?\s+(?:async\s+)?fn\s+\w+|pub\s+(?:struct|enum|const)\s+\w+)/g)) {
      const item = match[1]
      if (!/\bfn\b/.test(item) || /module_exports/.test(match[0])) continue
      if (!/catch_unwind/.test(match[0])) missing.push(`${path.basename(file)}: ${item}`)
    }
  }
  assert.deepEqual(missing, [])
})
