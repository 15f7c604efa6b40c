#!/usr/bin/env node
// `npm install` hook: use a prebuilt binary when one matches this machine, otherwise
// build from source with cargo. Set QUOTA_ENGINE_SKIP_BUILD=1 to skip both.
'use strict'

const fs = require('node:fs')
const path = require('node:path')
const { build, platformSuffix } = require('./build-native.js')

const root = path.resolve(__dirname, '..')
const suffix = platformSuffix()

function hasPrebuilt() {
  if (fs.existsSync(path.join(root, `quota-engine.${suffix}.node`))) return true
  try {
    require.resolve(`@omniroute/quota-engine-${suffix}`, { paths: [root] })
    return true
  } catch {
    return false
  }
}

if (process.env.QUOTA_ENGINE_SKIP_BUILD === '1') {
  console.log('quota-engine: QUOTA_ENGINE_SKIP_BUILD=1, not building')
} else if (hasPrebuilt()) {
  console.log(`quota-engine: using the prebuilt binary for ${suffix}`)
} else if (!fs.existsSync(path.join(root, 'Cargo.toml'))) {
  console.error(`quota-engine: no prebuilt binary for ${suffix} and no sources to build from`)
  process.exit(1)
} else {
  console.log(`quota-engine: no prebuilt binary for ${suffix}; building from source with cargo (about 2 minutes)`)
  build({ release: true })
}
