#!/usr/bin/env node
// Runs a script (`node scripts/with-hooks.js bench/run.mjs …`) with the package's loader
// pointed at the build with the test and bench hooks (`node scripts/build-native.js
// --test-hooks` makes it).
'use strict'
const { spawnSync } = require('node:child_process')
const path = require('node:path')
const { platformSuffix } = require('./build-native.js')

const root = path.resolve(__dirname, '..')
const hooks = path.join(root, 'target', 'test-hooks', `quota-engine.${platformSuffix()}.node`)
const result = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(2)], {
  cwd: root,
  env: { ...process.env, NAPI_RS_NATIVE_LIBRARY_PATH: hooks },
  stdio: 'inherit',
})
process.exit(result.status ?? 1)
