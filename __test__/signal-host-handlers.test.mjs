// A host that handles SIGTERM with process.on() or process.once() (registered before the
// first record, as a server does at startup) keeps control of its shutdown: the engine's
// commit-at-signal listener commits and does not re-raise the signal (docs/reliability.md).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

const require = createRequire(import.meta.url)
const entry = require.resolve('@omniroute/quota-engine')

for (const how of ['on', 'once']) {
  test(`host's process.${how}('SIGTERM') graceful shutdown survives the engine's signal listener`, async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-review-sig-'))
    const source = `
      process.${how}('SIGTERM', () => {
        process.stdout.write('HOST-SHUTDOWN-START\\n')
        setTimeout(() => { process.stdout.write('HOST-SHUTDOWN-DONE\\n'); process.exit(0) }, 200)
      })
      const { getSqliteQuotaStore } = require(${JSON.stringify(entry)})
      getSqliteQuotaStore().consume('k', { poolId: 'p', unit: 'requests', window: 'daily' }, 1).then(() => {
        process.stdout.write('READY\\n')
        setInterval(() => {}, 1000)
      })
    `
    const child = spawn(process.execPath, ['-e', source], { env: { ...process.env, DATA_DIR: dataDir, QUOTA_RECORD_FLUSH_MS: '60000' } })
    let out = ''
    let err = ''
    child.stderr.on('data', (d) => { err += d })
    const exit = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
    await new Promise((resolve) => child.stdout.on('data', (d) => { out += d; if (out.includes('READY')) resolve() }))
    child.kill('SIGTERM')
    const { code, signal } = await exit
    fs.rmSync(dataDir, { recursive: true, force: true })
    assert.deepEqual({ code, signal, done: out.includes('HOST-SHUTDOWN-DONE') }, { code: 0, signal: null, done: true }, out + err)
  })
}
