#!/usr/bin/env node
// `npm test`'s JavaScript half: builds the addon as it ships (no test hooks) and, in its
// own target dir, with the test hooks (Cargo feature `test-hooks`), then runs
// `node --test __test__/` with the loader pointed at the hooks build. The suites see the
// package exactly as the host imports it; __test__/surface.test.mjs checks that the
// shipping build has no hook.
'use strict'
const { spawnSync } = require('node:child_process')
const path = require('node:path')
const { build } = require('./build-native.js')

const shipping = build({ release: true })
const hooks = build({ release: true, testHooks: true })
const env = { ...process.env, NAPI_RS_NATIVE_LIBRARY_PATH: hooks, QUOTA_ENGINE_SHIPPING_BINARY: shipping }
const args = ['--test', ...(process.argv.length > 2 ? process.argv.slice(2) : ['__test__/'])]
const result = spawnSync(process.execPath, args, { cwd: path.resolve(__dirname, '..'), env, stdio: 'inherit' })
process.exit(result.status ?? 1)
