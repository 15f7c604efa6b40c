#!/usr/bin/env node
// `npm install` hook. It never fails an install of the published package: that package
// carries no Rust sources, so all it can do is say whether the prebuilt binary for this
// machine (the optional dependency @omniroute/quota-engine-<platform>) is there, and warn
// when it is not — `require` then throws one clear error (lib/native.js) instead.
//
// In a clone (Cargo.toml beside this folder) it is the contributor's build: no prebuilt
// binary → build from source with cargo, when cargo is on PATH (a failing build fails the
// install, as a contributor wants); without cargo, a warning and exit 0.
// QUOTA_ENGINE_SKIP_BUILD=1 skips everything.
'use strict'

const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')

function warn(message) {
  console.warn(`quota-engine: warning: ${message}`)
}

function hasPrebuilt(suffix, packageName) {
  if (fs.existsSync(path.join(root, `quota-engine.${suffix}.node`))) return true
  try {
    require.resolve(`${packageName}/package.json`, { paths: [root] })
    return true
  } catch {
    return false
  }
}

function cargoOnPath() {
  const r = require('node:child_process').spawnSync('cargo', ['--version'], { stdio: 'ignore' })
  return !r.error && r.status === 0
}

/** The published package's path: report, never fail. */
function registryInstall(suffix, packageName) {
  const { publishedSuffixes } = require('./platform.js')
  if (!publishedSuffixes().includes(suffix)) {
    warn(
      `no prebuilt binary is published for ${suffix}; require('@omniroute/quota-engine') will ` +
        'throw until one is built from source (clone the repository, install Rust, npm run build)',
    )
    return
  }
  warn(
    `the prebuilt binary for ${suffix} (${packageName}) was not installed, so ` +
      `require('@omniroute/quota-engine') will throw until it is. Fix: npm install --include=optional ` +
      '(it is an optional dependency; --omit=optional, a lockfile made on another platform or ' +
      'https://github.com/npm/cli/issues/4828 can skip it)',
  )
}

function main() {
  if (process.env.QUOTA_ENGINE_SKIP_BUILD === '1') {
    console.log('quota-engine: QUOTA_ENGINE_SKIP_BUILD=1, not building')
    return 0
  }
  const { platformSuffix, platformPackage } = require('./platform.js')
  const suffix = platformSuffix()
  const packageName = platformPackage(suffix)
  if (hasPrebuilt(suffix, packageName)) {
    console.log(`quota-engine: using the prebuilt binary for ${suffix}`)
    return 0
  }
  if (!fs.existsSync(path.join(root, 'Cargo.toml'))) {
    registryInstall(suffix, packageName)
    return 0
  }
  if (!cargoOnPath()) {
    warn(`no prebuilt binary for ${suffix} and cargo is not on PATH: not building from source (install Rust from https://rustup.rs, then npm run build)`)
    return 0
  }
  console.log(`quota-engine: no prebuilt binary for ${suffix}; building from source with cargo (about 2 minutes)`)
  // Only a clone has this script (it is not in the published files).
  require('./build-native.js').build({ release: true })
  return 0
}

try {
  process.exitCode = main()
} catch (err) {
  if (fs.existsSync(path.join(root, 'Cargo.toml'))) throw err
  // Whatever went wrong, the published package's install must not fail because of it.
  warn(`install check failed (${err && err.message}); continuing`)
  process.exitCode = 0
}
