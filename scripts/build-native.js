#!/usr/bin/env node
// Builds the addon from source with cargo and puts it where index.js looks for it
// (`quota-engine.<platform>.node` beside package.json). Used by `npm install` in a clone
// when no prebuilt binary matches this machine, and by `npm test` / `npm run bench` so they
// always run the code in this tree. Needs only Node, npm and cargo: not the napi CLI.
// A contributor tool: not in the published package.
'use strict'

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const { platformSuffix } = require('./platform.js')

const root = path.resolve(__dirname, '..')

/**
 * Builds the addon; returns where it put it. `testHooks`: with the test and bench hooks
 * (Cargo feature `test-hooks`), in its own target dir and placed under it — never where
 * the package's loader looks, so the binary that ships never carries them.
 */
function build({ release, testHooks = false }) {
  // A target always named (CARGO_BUILD_TARGET when set, else rustc's host), as the napi CLI
  // does (scripts/check-bindings.js): both build under target/.../<triple>/ and share one
  // build of the dependencies instead of compiling them twice.
  const args = ['build', '--lib', '--target', targetTriple(), '--message-format=json-render-diagnostics']
  if (release) args.push('--release')
  if (testHooks) args.push('--features', 'test-hooks', '--target-dir', path.join('target', 'test-hooks'))
  const result = spawnSync('cargo', args, {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
  })
  if (result.error) {
    throw new Error(`could not run cargo (${result.error.message}); install Rust from https://rustup.rs`)
  }
  if (result.status !== 0) throw new Error(`cargo build failed with exit code ${result.status}`)
  let artifact = null
  for (const line of result.stdout.split('\n')) {
    if (!line.startsWith('{')) continue
    const message = JSON.parse(line)
    if (message.reason === 'compiler-artifact' && message.target.kind.includes('cdylib')) {
      artifact = message.filenames.find((f) => /\.(so|dylib|dll)$/.test(f))
    }
  }
  if (!artifact) throw new Error('cargo did not report the cdylib artifact')
  const destination = testHooks
    ? path.join(root, 'target', 'test-hooks', `quota-engine.${platformSuffix()}.node`)
    : path.join(root, `quota-engine.${platformSuffix()}.node`)
  // Copy to a temporary name and rename, so a process that has the old binary loaded
  // keeps its mapping and a reader never sees a half-written file.
  const temporary = `${destination}.${process.pid}.tmp`
  fs.copyFileSync(artifact, temporary)
  fs.renameSync(temporary, destination)
  return destination
}

function targetTriple() {
  if (process.env.CARGO_BUILD_TARGET) return process.env.CARGO_BUILD_TARGET
  const rustc = spawnSync(process.env.RUSTC || 'rustc', ['-vV'], { cwd: root, encoding: 'utf8' })
  const host = /^host: (\S+)$/m.exec(rustc.stdout ?? '')
  if (!host) throw new Error(`could not run rustc -vV (${rustc.error?.message ?? rustc.stderr}); install Rust from https://rustup.rs`)
  return host[1]
}

module.exports = { build, platformSuffix }

if (require.main === module) {
  const release = !process.argv.includes('--debug')
  const destination = build({ release, testHooks: process.argv.includes('--test-hooks') })
  console.log(`built ${path.relative(root, destination)} (${release ? 'release' : 'debug'})`)
}
