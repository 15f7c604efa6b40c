// The package's declarations are valid TypeScript: `tsc --strict` over index.d.ts (which
// re-exports binding.d.ts) and every compat/<entry>.d.ts reports no error — a type the
// generated binding.d.ts names but never declares, or two declarations of one export,
// would break every TypeScript host that imports the package.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const require = createRequire(import.meta.url)
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

test('tsc --strict finds no error in index.d.ts and compat/*.d.ts', () => {
  const tsc = require.resolve('typescript/bin/tsc')
  const compat = fs.readdirSync(path.join(root, 'compat')).filter((f) => f.endsWith('.d.ts'))
  assert.ok(compat.length > 0)
  const files = ['index.d.ts', ...compat.map((f) => path.join('compat', f))]
  const run = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', ...files], { cwd: root, encoding: 'utf8' })
  assert.equal(run.status, 0, `tsc reported:\n${run.stdout}${run.stderr}`)
})

// Every type the host's own modules export, by the host file it came from: the host's files
// that stay (its UI, QuotaStore.ts, types.ts) import them from the paths that become
// compat re-exports, so each entry must export each name.
const HOST_TYPES = {
  fairShare: ['FairShareDimension', 'FairShareAllocation', 'FairShareInput', 'FairShareDecision'],
  dimensions: ['QuotaUnit', 'QuotaWindow', 'Policy', 'QuotaDimension', 'PoolAllocation', 'ProviderPlan', 'QuotaPool', 'DimensionKey'],
  burnRate: ['BurnRateSample', 'BurnRateResult'],
  planResolver: ['RuntimeSignals'],
  accountBuckets: ['UsageQuotaSlim', 'ClaudeUsageResult'],
  quotaConsumption: ['ConsumptionEvent'],
  quotaShareStrategy: ['QuotaShareResult', 'QuotaShareOptions'],
  quotaShareConcurrency: ['QuotaShareSlotOptions'],
}

test("each compat entry exports the types its host module exports, as the host's files use them", (t) => {
  const tsc = require.resolve('typescript/bin/tsc')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-host-types-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  const lines = Object.entries(HOST_TYPES).map(
    ([entry, names]) => `import type { ${names.join(', ')} } from '${path.relative(dir, path.join(root, 'compat', entry))}'`,
  )
  // Used as the host uses them.
  lines.push(
    "const event: ConsumptionEvent = { apiKeyId: 'k', dimensionKey: 'p:tokens:daily', unit: 'tokens', window: 'daily', bucketIndex: 1, consumed: 2, updatedAt: 3 }",
    "const usage: ClaudeUsageResult = { quotas: { 'session (5h)': { used: 1, total: 2, resetAt: null } } }",
    "const pool: Pick<QuotaPool, 'id' | 'allocations'> | null = null",
    "const policy: Policy = 'soft'",
    'const sample: BurnRateSample = { ts: 1, consumed: 2 }',
    'export { event, usage, pool, policy, sample }',
  )
  const file = path.join(dir, 'host-types.ts')
  fs.writeFileSync(file, `${lines.join('\n')}\n`)
  const run = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--skipLibCheck', file], { cwd: root, encoding: 'utf8' })
  assert.equal(run.status, 0, `tsc reported:\n${run.stdout}${run.stderr}`)
})
