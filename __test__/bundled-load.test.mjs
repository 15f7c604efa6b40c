// A bundled load (docs/integration.md#bundlers): a server bundler that takes the package into
// its output leaves the native binary behind; the package then says so, with the setting
// that fixes it, instead of sending the user to install a platform package they have.
// Bundled here with esbuild, as a server build bundles it; the fix, the package marked
// external, then loads.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'

const require = createRequire(import.meta.url)
const esbuild = require('esbuild')
const root = path.resolve(fileURLToPath(new URL('..', import.meta.url)))
const app = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-bundle-'))
after(() => fs.rmSync(app, { recursive: true, force: true }))

// An app that depends on the package, as a server's code imports it.
fs.mkdirSync(path.join(app, 'node_modules', '@omniroute'), { recursive: true })
fs.symlinkSync(root, path.join(app, 'node_modules', '@omniroute', 'quota-engine'), 'dir')
fs.writeFileSync(path.join(app, 'route.js'), "const { getKnownPlan } = require('@omniroute/quota-engine')\nconsole.log(JSON.stringify(getKnownPlan('kimi')))\n")

function bundleAndRun(external) {
  const outfile = path.join(app, 'out', `${external.join('-').replace(/\W/g, '_')}.js`)
  const result = esbuild.buildSync({ entryPoints: [path.join(app, 'route.js')], bundle: true, platform: 'node', outfile, external, logLevel: 'silent' })
  assert.equal(result.errors.length, 0)
  // The package's own binary, as an app has it: no test override of the loader.
  const env = { ...process.env }
  delete env.NAPI_RS_NATIVE_LIBRARY_PATH
  return spawnSync(process.execPath, [outfile], { encoding: 'utf8', env })
}

test('bundled into the server output: one error naming the bundler setting, code ERR_QUOTA_BUNDLED', () => {
  // `*.node` external: the bundler keeps the binary out but takes the JavaScript in.
  const run = bundleAndRun(['*.node'])
  assert.notEqual(run.status, 0)
  assert.match(run.stderr, /code: 'ERR_QUOTA_BUNDLED'/)
  assert.match(run.stderr, /serverExternalPackages: \["@omniroute\/quota-engine"\]/)
  assert.match(run.stderr, /--external:@omniroute\/quota-engine/)
  assert.doesNotMatch(run.stderr, /ERR_QUOTA_NO_BINARY|is not installed/)
})

test('marked external, as the error says: the bundled server loads the package from node_modules', () => {
  const run = bundleAndRun(['@omniroute/quota-engine'])
  assert.equal(run.status, 0, run.stderr)
  assert.equal(JSON.parse(run.stdout).provider, 'kimi')
})
