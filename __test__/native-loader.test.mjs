// The loader's error when no binary loads, and lib/ as host glue: it reads no environment
// variable (every setting is the engine's, src/engine/config.rs; the loader's own override
// is read by binding.js and scripts/platform.js).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

test('lib/ reads no environment variable', () => {
  const readers = []
  for (const name of fs.readdirSync(path.join(root, 'lib'))) {
    if (!name.endsWith('.js')) continue
    const text = fs.readFileSync(path.join(root, 'lib', name), 'utf8')
    text.split('\n').forEach((line, i) => {
      if (/process\s*(\.\s*env|\[\s*['"`]env)/.test(line)) readers.push(`lib/${name}:${i + 1}: ${line.trim()}`)
    })
  }
  assert.deepEqual(readers, [])
})

test('an override binary that does not load is named in ERR_QUOTA_NO_BINARY, with the way back', () => {
  const missing = path.join(root, 'target', 'no-such-binary.node')
  const script = `try { require(${JSON.stringify(root)}) } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })) }`
  const r = spawnSync(process.execPath, ['-e', script], {
    env: { ...process.env, NAPI_RS_NATIVE_LIBRARY_PATH: missing },
    encoding: 'utf8',
  })
  assert.equal(r.status, 0, r.stderr)
  const err = JSON.parse(r.stdout)
  assert.equal(err.code, 'ERR_QUOTA_NO_BINARY')
  assert.ok(err.message.includes(`NAPI_RS_NATIVE_LIBRARY_PATH names (${missing})`), err.message)
  assert.ok(err.message.includes('Unset it to use @omniroute/quota-engine-'), err.message)
})
