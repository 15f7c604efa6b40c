// Each drop-in entry exports exactly the appendix's names, through `import` and `require`
// alike, as the host's one-line re-export modules will load it.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { APPENDIX } from './support/appendix.mjs'

const require = createRequire(import.meta.url)

for (const [entry, names] of Object.entries(APPENDIX)) {
  const specifier = `@omniroute/quota-engine/compat/${entry}`

  test(`compat/${entry} (import) exports exactly the appendix's names`, async () => {
    const module = await import(specifier)
    const exported = Object.keys(module).filter((name) => name !== 'default')
    assert.deepEqual(exported.sort(), [...names].sort())
    for (const name of names) assert.notEqual(module[name], undefined, `${name} is defined`)
  })

  test(`compat/${entry} (require) exports exactly the appendix's names`, () => {
    const module = require(specifier)
    assert.deepEqual(Object.keys(module).sort(), [...names].sort())
    for (const name of names) assert.notEqual(module[name], undefined, `${name} is defined`)
  })

  test(`compat/${entry}: import and require give the same values`, async () => {
    const esm = await import(specifier)
    const cjs = require(specifier)
    for (const name of names) assert.equal(esm[name], cjs[name], name)
    // A default import (which the declarations, read as CommonJS, allow) is require()'s object.
    assert.equal(esm.default, cjs, 'import x from')
  })
}

test('the main entry exports the core API through import and require', async () => {
  const expected = [
    'enforceQuotaShare',
    'recordConsumption',
    'SqliteQuotaStore',
    'createPool',
    'closeQuotaDb',
    'gcConsumption',
    'installHost',
    'WINDOW_MS',
    'computeBurnRate',
    'computeBurnRateFromWindow',
    'decideFairShare',
    'dimensionKeyToString',
    'getKnownPlan',
    'knownProviders',
  ]
  const esm = await import('@omniroute/quota-engine')
  const cjs = require('@omniroute/quota-engine')
  for (const name of expected) {
    assert.notEqual(esm[name], undefined, `import { ${name} }`)
    assert.equal(esm[name], cjs[name], name)
  }
  // index.mjs re-exports every runtime name of the CommonJS loader, and nothing else.
  const runtimeNames = Object.keys(cjs).filter((name) => !name.startsWith('__'))
  assert.deepEqual(Object.keys(esm).filter((n) => n !== 'default').sort(), runtimeNames.sort())
  assert.equal(esm.default, cjs, 'import x from')
})

test('sync functions return plain values, not promises', async () => {
  const { decideFairShare } = await import('@omniroute/quota-engine/compat/fairShare')
  const { getKnownPlan, knownProviders } = await import('@omniroute/quota-engine/compat/planRegistry')
  const { computeBurnRate, computeBurnRateFromWindow } = await import('@omniroute/quota-engine/compat/burnRate')
  const { dimensionKeyToString } = await import('@omniroute/quota-engine/compat/dimensions')
  const results = [
    decideFairShare({ dimensions: [], allocation: { weight: 50, policy: 'hard' }, consumedByThisKey: {}, saturationThreshold: 0.5 }),
    getKnownPlan('kimi'),
    knownProviders(),
    computeBurnRate([]),
    computeBurnRateFromWindow(0, 3_600_000),
    dimensionKeyToString({ poolId: 'p', unit: 'usd', window: 'daily' }),
  ]
  for (const result of results) assert.ok(!(result instanceof Promise))
})

test('the main entry exports every name of docs/contract.md §10 through import and require', async () => {
  const expected = [
    'QUOTA_SHARE_STRATEGY',
    'DEFAULT_LEASE_MS',
    'incrementInflight',
    'decrementInflight',
    'getInflight',
    '_clearInflightForTest',
    '_inflightSizeForTest',
    'SATURATION_THRESHOLD_PCT',
    'recordUsage',
    'isBucketSaturated',
    'updateAccountBuckets',
    '_clearBucketsForTest',
    '_bucketCountForTest',
    'selectQuotaShareTarget',
    '_clearDrrStateForTest',
    '_getDrrDeficitForTest',
    'quotaShareConcurrencyKey',
    'acquireQuotaShareConcurrencySlot',
  ]
  const esm = await import('@omniroute/quota-engine')
  const cjs = require('@omniroute/quota-engine')
  for (const name of expected) {
    assert.notEqual(cjs[name], undefined, `require: ${name}`)
    assert.equal(esm[name], cjs[name], `import: ${name}`)
  }
  assert.equal(cjs.QUOTA_SHARE_STRATEGY, 'quota-share')
  assert.equal(cjs.DEFAULT_LEASE_MS, 120_000)
  assert.equal(cjs.SATURATION_THRESHOLD_PCT, 100)
  // The compat entries hand out the very same functions as the main entry.
  const strategy = await import('@omniroute/quota-engine/compat/quotaShareStrategy')
  assert.equal(strategy.selectQuotaShareTarget, cjs.selectQuotaShareTarget)
  // The native crossing is not part of the API.
  for (const name of Object.keys(cjs)) assert.ok(!name.startsWith('__quotaShare'), name)
})
