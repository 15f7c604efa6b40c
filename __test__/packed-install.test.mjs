// Installable without Rust: `npm pack` gives the main tarball (no binary, no sources) and
// the platform package's (the binary already built for this tree, placed as `npm run
// build` places it); both install offline into an empty project whose PATH has no cargo,
// the install script picks the prebuilt binary, and the package loads, decides and runs
// the demo. Without the platform package the same install still succeeds (a warning), and
// `require` throws one clear error naming the platform, the package and the fix.
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
const { platformSuffix } = require('../scripts/platform.js')
const { placeBinary } = require('../scripts/place-binary.js')
const suffix = platformSuffix()
const hasPlatformPackage = fs.existsSync(path.join(repo, 'npm', suffix, 'package.json'))

/** The npm CLI script, run with this Node (independent of PATH). */
function npmCli() {
  const candidates = [
    process.env.npm_execpath,
    path.resolve(path.dirname(process.execPath), '../lib/node_modules/npm/bin/npm-cli.js'),
    path.resolve(path.dirname(process.execPath), 'node_modules/npm/bin/npm-cli.js'),
  ]
  const found = candidates.find((c) => c && /npm-cli\.js$/.test(c) && fs.existsSync(c))
  assert.ok(found, 'the npm CLI next to this Node')
  return found
}

/**
 * A clean environment: HOME and the npm cache only (no QUOTA_ENGINE_SKIP_BUILD, no npm_*
 * of an enclosing `npm test`), and a PATH without any folder that holds cargo or rustc,
 * plus a folder with `node` (on Windows also the few variables a process needs there).
 */
function cleanEnv(shimDir) {
  const hasRust = (dir) => ['cargo', 'rustc', 'cargo.exe', 'rustc.exe'].some((bin) => fs.existsSync(path.join(dir, bin)))
  const dirs = (process.env.PATH || '').split(path.delimiter).filter((d) => d && !hasRust(d))
  fs.mkdirSync(shimDir, { recursive: true })
  const node = path.join(shimDir, path.basename(process.execPath))
  try {
    fs.symlinkSync(process.execPath, node)
  } catch {
    fs.copyFileSync(process.execPath, node) // Windows without the symlink privilege
  }
  const env = { HOME: os.homedir(), PATH: [shimDir, ...dirs].join(path.delimiter) }
  const keep = ['npm_config_cache', 'TMPDIR']
  if (process.platform === 'win32') keep.push('SystemRoot', 'windir', 'ComSpec', 'PATHEXT', 'TEMP', 'TMP', 'USERPROFILE', 'APPDATA', 'LOCALAPPDATA')
  for (const name of keep) if (process.env[name]) env[name] = process.env[name]
  return env
}

/** The package's `quota-engine` command as npm linked it into the project. */
function binCommand(app) {
  const bin = path.join(app, 'node_modules', '.bin', 'quota-engine')
  // Windows links a .cmd shim, which only a shell runs; the script it calls is this one.
  if (process.platform === 'win32') return [process.execPath, [path.join(app, 'node_modules', '@omniroute', 'quota-engine', 'bin', 'quota-engine.js')]]
  return [bin, []]
}

function run(command, args, options) {
  const r = spawnSync(command, args, { encoding: 'utf8', timeout: 90_000, ...options })
  return { code: r.status, stdout: r.stdout || '', stderr: r.stderr || '', error: r.error }
}

let tmp
let env
let packs
let mainInfo
let platformInfo
let commanderTarball
const manifest = JSON.parse(fs.readFileSync(path.join(repo, 'package.json'), 'utf8'))
const npm = (args, cwd) => run(process.execPath, [npmCli(), ...args], { cwd, env })

before(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-packed-'))
  env = cleanEnv(path.join(tmp, 'shim'))
  assert.ok(run('cargo', ['--version'], { env }).error, 'cargo is not reachable on the stripped PATH')
  packs = path.join(tmp, 'packs')
  fs.mkdirSync(packs)

  // The main package: no binary, no Rust sources, no contributor scripts.
  const main = npm(['pack', '--ignore-scripts', '--json', '--pack-destination', packs], repo)
  assert.equal(main.code, 0, main.stderr)
  ;[mainInfo] = JSON.parse(main.stdout)
  // Its one dependency, packed from this tree's node_modules: the installs below need
  // neither the registry nor a warm npm cache.
  const commander = npm(['pack', '--ignore-scripts', '--json', '--pack-destination', packs], path.join(repo, 'node_modules', 'commander'))
  assert.equal(commander.code, 0, commander.stderr)
  commanderTarball = JSON.parse(commander.stdout)[0].filename
  if (!hasPlatformPackage) return

  // The platform package, from a copy of npm/<suffix>/ with the binary placed as
  // `npm run build` places it (the debug or release build this tree already has).
  const binary = path.join(repo, `quota-engine.${suffix}.node`)
  assert.ok(fs.existsSync(binary), `the built addon ${binary} (npm test builds it first)`)
  const platformDir = path.join(tmp, 'npm', suffix)
  fs.cpSync(path.join(repo, 'npm', suffix), platformDir, { recursive: true, filter: (src) => !src.endsWith('.node') })
  placeBinary({ root: repo, npmDir: path.join(tmp, 'npm'), suffix })
  const platform = npm(['pack', '--json', '--pack-destination', packs], platformDir)
  assert.equal(platform.code, 0, platform.stderr)
  ;[platformInfo] = JSON.parse(platform.stdout)
})

after(() => {
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true })
})

/** An empty project, offline: only the given tarballs and the npm cache. */
function installInto(name, tarballs) {
  const app = path.join(tmp, name)
  fs.mkdirSync(app)
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }))
  const files = [commanderTarball, ...tarballs].map((t) => path.join(packs, t))
  const install = npm(['install', '--offline', '--no-audit', '--no-fund', '--foreground-scripts', ...files], app)
  return { app, install }
}

test('the main tarball holds what users need and nothing else', () => {
  const files = mainInfo.files.map((f) => f.path)
  assert.deepEqual(files.filter((f) => f.endsWith('.node')), [], 'the main tarball carries no binary')
  assert.ok(!files.includes('Cargo.toml'), 'nor the Rust sources')
  assert.deepEqual(files.filter((f) => /^(src|tests|bench|npm|target|__test__|\.github|\.ci)\//.test(f)), [])
  assert.ok(!files.includes('scripts/build-native.js'), 'nor the contributor build script')
  for (const f of ['LICENSE', 'README.md', 'index.js', 'binding.js', 'lib/native.js', 'bin/quota-engine.js', 'cli/copy-binary.js', 'scripts/install.js', 'scripts/platform.js', 'lib/surface.js']) {
    assert.ok(files.includes(f), f)
  }
  assert.deepEqual(files.filter((f) => f.startsWith('scripts/')).sort(), ['scripts/install.js', 'scripts/platform.js'])
  for (const f of ['repository', 'bugs', 'homepage']) assert.ok(manifest[f], f)
  assert.equal(manifest.publishConfig.access, 'public')
  assert.equal(manifest.optionalDependencies[`@omniroute/quota-engine-${suffix}`], manifest.version)
})

test('the packed tarballs install into an empty project without cargo, offline, load and run the demo', { skip: !hasPlatformPackage && `no npm/${suffix}`, timeout: 180_000 }, () => {
  assert.equal(platformInfo.name, `@omniroute/quota-engine-${suffix}`)
  assert.deepEqual(platformInfo.files.map((f) => f.path).filter((f) => f.endsWith('.node')), [`quota-engine.${suffix}.node`])

  const { app, install } = installInto('app', [mainInfo.filename, platformInfo.filename])
  assert.equal(install.code, 0, install.stdout + install.stderr)
  assert.match(install.stdout, new RegExp(`quota-engine: using the prebuilt binary for ${suffix}`))
  const installed = path.join(app, 'node_modules', '@omniroute', 'quota-engine')
  assert.deepEqual(fs.readdirSync(installed).filter((f) => f.endsWith('.node')), [], 'nothing was built into the main package')

  const script = `${DECIDE_ONCE}
    console.log(JSON.stringify({ decision, from: require.resolve('@omniroute/quota-engine-${suffix}'), metrics: typeof q.metrics() }))
  `
  const loaded = run(process.execPath, ['-e', script], { cwd: app, env })
  assert.equal(loaded.code, 0, loaded.stderr)
  const result = JSON.parse(loaded.stdout)
  assert.deepEqual(result.decision, { kind: 'block', reason: 'fair-share' })
  assert.equal(result.from, path.join(fs.realpathSync(app), 'node_modules', '@omniroute', `quota-engine-${suffix}`, `quota-engine.${suffix}.node`))
  assert.equal(result.metrics, 'string')

  const esm = run(process.execPath, ['--input-type=module', '-e', "import { knownProviders } from '@omniroute/quota-engine'; console.log(knownProviders().includes('kimi'))"], { cwd: app, env })
  assert.equal(esm.stdout.trim(), 'true', esm.stderr)
  const [bin, binArgs] = binCommand(app)
  const version = run(bin, [...binArgs, '--version'], { cwd: app, env })
  assert.equal(version.stdout.trim(), manifest.version, version.stderr)

  // The demo (`npm run demo`): the real engine on a temporary SQLite file, a chart written.
  const svg = path.join(app, 'quota-simulation.svg')
  const demo = run(bin, [...binArgs, 'simulate', '--json', '--no-progress', '--out', svg], { cwd: app, env })
  assert.equal(demo.code, 0, demo.stderr)
  assert.ok(JSON.parse(demo.stdout), 'a JSON summary')
  assert.match(fs.readFileSync(svg, 'utf8'), /<svg[ >]/)
})

test('without the platform package the install still succeeds, and require throws one clear error', { timeout: 120_000 }, () => {
  const { app, install } = installInto('app-without', [mainInfo.filename])
  assert.equal(install.code, 0, install.stdout + install.stderr)
  const output = install.stdout + install.stderr
  assert.match(output, new RegExp(`quota-engine: warning: the prebuilt binary for ${suffix} \\(@omniroute/quota-engine-${suffix}\\) was not installed`))
  assert.match(output, /npm install --include=optional/)
  assert.deepEqual(fs.readdirSync(path.join(app, 'node_modules', '@omniroute')), ['quota-engine'], 'no platform package came from anywhere')

  const script = `
    try {
      require('@omniroute/quota-engine')
      console.log(JSON.stringify({ loaded: true }))
    } catch (err) {
      let depth = 0
      for (let c = err.cause; c; c = c.cause) depth++
      console.log(JSON.stringify({ code: err.code, message: err.message, platform: err.platform, packageName: err.packageName, cause: err.cause && err.cause.message, depth }))
    }
  `
  const r = run(process.execPath, ['-e', script], { cwd: app, env })
  assert.equal(r.code, 0, r.stderr)
  const err = JSON.parse(r.stdout)
  assert.equal(err.code, 'ERR_QUOTA_NO_BINARY')
  assert.equal(err.platform, suffix)
  assert.equal(err.packageName, `@omniroute/quota-engine-${suffix}`)
  assert.ok(err.message.includes(suffix), err.message)
  assert.ok(err.message.includes(`the package @omniroute/quota-engine-${suffix} is not installed`), err.message)
  assert.ok(err.message.includes('npm install --include=optional'), err.message)
  assert.ok(err.message.includes('npm run build'), err.message)
  assert.match(err.cause, /Cannot find native binding/, 'the loader error is the cause')
  assert.ok(err.depth >= 2, 'and its cause chain holds the load attempts')

  // ESM too, and the error is the same one thrown again (not a half-loaded module).
  const esm = run(process.execPath, ['--input-type=module', '-e', "import('@omniroute/quota-engine').then(() => console.log('loaded'), (e) => import('@omniroute/quota-engine').catch((again) => console.log(e.code, again.code)))"], { cwd: app, env })
  assert.equal(esm.stdout.trim(), 'ERR_QUOTA_NO_BINARY ERR_QUOTA_NO_BINARY', esm.stderr)
})
