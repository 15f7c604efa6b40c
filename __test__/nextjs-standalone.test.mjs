// Next.js `output: 'standalone'` (docs/nextjs-standalone.md): the trace copies
// @omniroute/quota-engine into .next/standalone/node_modules but not its optional platform
// package, so the deployed server cannot load the binary. `quota-engine copy-binary
// <standalone-dir>` copies it there. Here: an app whose node_modules holds the package as
// npm installs it (the files `npm pack` ships, plus the platform package with this tree's
// binary), and two minimal standalone trees — npm's flat layout and pnpm's `.pnpm` one —
// holding the main package only; the command makes each of them load and decide.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'
import { DECIDE_ONCE } from './support/decision-script.mjs'

const require = createRequire(import.meta.url)
const repo = fileURLToPath(new URL('..', import.meta.url))
const { platformSuffix, platformPackage } = require('../scripts/platform.js')
const { placeBinary } = require('../scripts/place-binary.js')
const suffix = platformSuffix()
const platformName = platformPackage(suffix)
const binaryFile = `quota-engine.${suffix}.node`
const { version } = JSON.parse(fs.readFileSync(path.join(repo, 'package.json'), 'utf8'))
const skip = !fs.existsSync(path.join(repo, 'npm', suffix, 'package.json')) && `no npm/${suffix}`

let tmp
let app
let mainFiles

function run(args, options = {}) {
  const env = { ...process.env }
  delete env.NAPI_RS_NATIVE_LIBRARY_PATH
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 60_000, env, ...options })
  return { code: r.status, stdout: r.stdout || '', stderr: r.stderr || '' }
}

/** The files of the published main package, as `npm pack` lists them. */
function packedFiles() {
  const npmCli = [
    process.env.npm_execpath,
    path.resolve(path.dirname(process.execPath), '../lib/node_modules/npm/bin/npm-cli.js'),
    path.resolve(path.dirname(process.execPath), 'node_modules/npm/bin/npm-cli.js'),
  ].find((c) => c && /npm-cli\.js$/.test(c) && fs.existsSync(c))
  assert.ok(npmCli, 'the npm CLI next to this Node')
  const r = run([npmCli, 'pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: repo })
  assert.equal(r.code, 0, r.stderr)
  return JSON.parse(r.stdout)[0].files.map((f) => f.path)
}

function copyMainPackage(destination) {
  for (const file of mainFiles) {
    fs.mkdirSync(path.dirname(path.join(destination, file)), { recursive: true })
    fs.copyFileSync(path.join(repo, file), path.join(destination, file))
  }
}

/** A standalone tree as Next.js leaves it: server.js and the traced main package only. */
function standaloneTree(name, layout) {
  const dir = path.join(tmp, name)
  const modules = path.join(dir, 'node_modules')
  if (layout === 'pnpm') {
    const real = path.join(modules, '.pnpm', `@omniroute+quota-engine@${version}`, 'node_modules', '@omniroute', 'quota-engine')
    copyMainPackage(real)
    fs.mkdirSync(path.join(modules, '@omniroute'), { recursive: true })
    fs.symlinkSync(real, path.join(modules, '@omniroute', 'quota-engine'), process.platform === 'win32' ? 'junction' : 'dir')
  } else {
    copyMainPackage(path.join(modules, '@omniroute', 'quota-engine'))
  }
  fs.writeFileSync(
    path.join(dir, 'server.js'),
    `${DECIDE_ONCE}const binary = require.resolve('${platformName}')
console.log(JSON.stringify({ decision, binary }))
`,
  )
  return dir
}

function serve(dir) {
  return run([path.join(dir, 'server.js')], { cwd: dir })
}

function copyBinary(args) {
  return run([path.join(app, 'node_modules', '@omniroute', 'quota-engine', 'bin', 'quota-engine.js'), 'copy-binary', ...args], { cwd: app })
}

before(() => {
  if (skip) return
  assert.ok(fs.existsSync(path.join(repo, binaryFile)), `the built addon ${binaryFile} (npm test builds it first)`)
  tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'qe-standalone-')))
  mainFiles = packedFiles()
  // The app's node_modules, as `npm install @omniroute/quota-engine` leaves it.
  app = path.join(tmp, 'app')
  const modules = path.join(app, 'node_modules')
  copyMainPackage(path.join(modules, '@omniroute', 'quota-engine'))
  fs.cpSync(path.join(repo, 'node_modules', 'commander'), path.join(modules, 'commander'), { recursive: true })
  fs.cpSync(path.join(repo, 'npm', suffix), path.join(tmp, 'npm', suffix), { recursive: true, filter: (src) => !src.endsWith('.node') })
  placeBinary({ root: repo, npmDir: path.join(tmp, 'npm'), suffix })
  fs.cpSync(path.join(tmp, 'npm', suffix), path.join(modules, '@omniroute', `quota-engine-${suffix}`), { recursive: true })
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }))
})

after(() => {
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true })
})

for (const layout of ['npm', 'pnpm']) {
  test(`copy-binary makes a standalone tree (${layout} layout) load the binary it lacked`, { skip, timeout: 120_000 }, () => {
    const standalone = standaloneTree(`standalone-${layout}`, layout)

    // As Next.js leaves it: the main package without its platform package.
    const lacking = serve(standalone)
    assert.notEqual(lacking.code, 0)
    assert.match(lacking.stderr, /ERR_QUOTA_NO_BINARY/)
    assert.match(lacking.stderr, new RegExp(`${platformName}`))

    const copied = copyBinary([standalone, '--json'])
    assert.equal(copied.code, 0, copied.stderr)
    const report = JSON.parse(copied.stdout)
    const landed = path.join(standalone, 'node_modules', '@omniroute', `quota-engine-${suffix}`)
    assert.equal(report.package, platformName)
    assert.equal(report.version, version)
    assert.equal(report.to, landed)
    assert.equal(report.loaded, true)
    assert.deepEqual(report.warnings, [])
    assert.deepEqual(fs.readFileSync(path.join(landed, binaryFile)), fs.readFileSync(path.join(repo, binaryFile)), 'the binary landed')
    assert.equal(JSON.parse(fs.readFileSync(path.join(landed, 'package.json'), 'utf8')).name, platformName)

    const served = serve(standalone)
    assert.equal(served.code, 0, served.stderr)
    const result = JSON.parse(served.stdout)
    assert.deepEqual(result.decision, { kind: 'block', reason: 'fair-share' })
    assert.equal(result.binary, path.join(landed, binaryFile), 'loaded from the standalone tree, not the app')

    // Again: the earlier copy is replaced, not nested.
    const again = copyBinary([standalone])
    assert.equal(again.code, 0, again.stderr)
    assert.match(again.stdout, new RegExp(`Copied ${platformName}@${version} to .*; it loads from there\\.`))
    assert.deepEqual(fs.readdirSync(path.join(standalone, 'node_modules', '@omniroute')).sort(), ['quota-engine', `quota-engine-${suffix}`])
  })
}

test('copy-binary refuses a missing folder, an unpublished platform, and a package that is not installed', { skip }, () => {
  const missing = copyBinary([path.join(tmp, 'nowhere')])
  assert.equal(missing.code, 2)
  assert.match(missing.stderr, /is not a folder/)

  const standalone = standaloneTree('standalone-errors', 'npm')
  const unknown = copyBinary([standalone, '--platform', 'plan9-mips'])
  assert.equal(unknown.code, 2)
  assert.match(unknown.stderr, /no prebuilt binary is published for plan9-mips/)

  const other = suffix === 'linux-arm64-musl' ? 'linux-x64-musl' : 'linux-arm64-musl'
  const absent = copyBinary([standalone, '--platform', other])
  assert.equal(absent.code, 1)
  assert.match(absent.stderr, new RegExp(`@omniroute/quota-engine-${other} is not installed`))
  assert.match(absent.stderr, /--include=optional --os=linux --cpu=/)
  assert.ok(!fs.existsSync(path.join(standalone, 'node_modules', '@omniroute', `quota-engine-${other}`)))
})
