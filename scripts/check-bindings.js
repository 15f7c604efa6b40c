#!/usr/bin/env node
// Checks that the committed loader and types (binding.js, binding.d.ts) are what napi-rs
// generates from this tree: builds with the napi CLI into target/bindings (release, with the
// test hooks, which the tests load through binding.js) and compares. Run by .ci/run and the
// release workflow; after a change to an exported function or its doc comment, regenerate
// with `npm run build` (or copy target/bindings/binding.* over) and commit them.
'use strict'
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const out = path.join('target', 'bindings')
const args = ['napi', 'build', '--platform', '--release', '--no-const-enum', '--features', 'test-hooks']
args.push('--target-dir', path.join('target', 'test-hooks'), '--output-dir', out, '--js', 'binding.js', '--dts', 'binding.d.ts')
const built = spawnSync('npx', args, { cwd: root, stdio: 'inherit' })
if (built.status !== 0) process.exit(built.status ?? 1)

let stale = 0
for (const file of ['binding.js', 'binding.d.ts']) {
  const generated = fs.readFileSync(path.join(root, out, file), 'utf8')
  if (generated !== fs.readFileSync(path.join(root, file), 'utf8')) {
    console.error(`${file} is not what napi-rs generates from this tree: diff -u ${file} ${path.join(out, file)}`)
    stale++
  }
}
if (stale > 0) process.exit(1)
console.log('binding.js and binding.d.ts are what napi-rs generates')
