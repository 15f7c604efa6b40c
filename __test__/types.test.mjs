// The package's declarations are valid TypeScript: `tsc --strict` over index.d.ts (which
// re-exports binding.d.ts) and every compat/<entry>.d.ts reports no error — a type the
// generated binding.d.ts names but never declares, or two declarations of one export,
// would break every TypeScript host that imports the package.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
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
