// The public surface (lib/surface.js) is the one list every entry file is made from:
// `require()` and `import` of the main entry give exactly its names, index.d.ts declares
// exactly them, every compat entry is what the table says, the native addon has no
// per-driver twins, and the binary that ships carries no test hook.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import { spawnSync } from 'node:child_process'

const require = createRequire(import.meta.url)
const { MAIN, COMPAT, mainNames } = require('../lib/surface.js')
const native = require('../binding.js')

const sorted = (names) => [...names].sort()

test('require() and import of the main entry give exactly the surface table', async () => {
  const cjs = require('..')
  const esm = await import('@omniroute/quota-engine')
  assert.deepEqual(sorted(Object.keys(cjs)), sorted(mainNames()))
  assert.deepEqual(sorted(Object.keys(esm).filter((k) => k !== 'default')), sorted(mainNames()))
  for (const name of mainNames()) assert.notEqual(cjs[name], undefined, name)
})

/** The value names a .d.ts exports: `export declare …` and `export { … } from`, not types. */
function declaredNames(file) {
  const text = fs.readFileSync(new URL(`../${file}`, import.meta.url), 'utf8')
  const names = new Set()
  for (const [, name] of text.matchAll(/^export declare (?:function|class|const) (\w+)/gm)) names.add(name)
  for (const [, list] of text.matchAll(/^export \{([^}]*)\} from/gm)) {
    for (const name of list.split(',').map((n) => n.trim()).filter(Boolean)) names.add(name)
  }
  return names
}

test('index.d.ts declares exactly what the main entry exports, and no export * of internals', () => {
  const text = fs.readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8')
  assert.doesNotMatch(text, /^export \* from/m)
  assert.deepEqual(sorted(declaredNames('index.d.ts')), sorted(mainNames()))
})

test('every compat entry (js, mjs, d.ts) exports exactly its row of the table', async () => {
  for (const [entry, [, names]] of Object.entries(COMPAT)) {
    const cjs = require(`@omniroute/quota-engine/compat/${entry}`)
    const esm = await import(`@omniroute/quota-engine/compat/${entry}`)
    assert.deepEqual(sorted(Object.keys(cjs)), sorted(names), entry)
    assert.deepEqual(sorted(Object.keys(esm).filter((k) => k !== 'default')), sorted(names), entry)
    assert.deepEqual(sorted(declaredNames(`compat/${entry}.d.ts`)), sorted(names), entry)
  }
})

test('the generated files are what lib/surface.js makes (node scripts/surface.js --check)', () => {
  const result = spawnSync(process.execPath, ['scripts/surface.js', '--check'], { cwd: new URL('..', import.meta.url), encoding: 'utf8' })
  assert.equal(result.status, 0, result.stderr)
})

test('no native function is written once per driver', () => {
  const base = (name) => name.replace(/^(redis|sqlite)(?=[A-Z])/i, '').toLowerCase()
  const names = Object.keys(native)
  const twins = names.filter((a) => /^(redis|sqlite)[A-Z]/i.test(a) && names.some((b) => b !== a && base(b) === base(a)))
  assert.deepEqual(twins, [])
  // It can fail: a made-up twin is caught.
  const fake = ['redisEnforce', 'enforce']
  assert.ok(fake.some((a) => /^(redis|sqlite)[A-Z]/i.test(a) && fake.some((b) => b !== a && base(b) === base(a))))
  assert.ok(MAIN.native.length > 0)
})

test('the binary that ships has no test or bench hook; the test build has them', () => {
  const shipping = process.env.QUOTA_ENGINE_SHIPPING_BINARY
  assert.ok(shipping && fs.existsSync(shipping), 'npm test names the shipping build (scripts/run-tests.js)')
  const load = (file) => {
    const module = { exports: {} }
    process.dlopen(module, file)
    return module.exports
  }
  const hooks = (exports) => Object.keys(exports).filter((k) => /ForTests$|ForBench$/.test(k))
  assert.deepEqual(hooks(load(shipping)), [])
  assert.ok(hooks(load(process.env.NAPI_RS_NATIVE_LIBRARY_PATH)).length >= 3)
})
