// Installable without Rust: `npm pack` gives the main tarball (no binary, no sources) and
// the platform package's (the binary already built for this tree, placed as `npm run
// build` places it); both install offline into an empty project whose PATH has no cargo,
// the install script picks the prebuilt binary, and the package loads and decides.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const repo = fileURLToPath(new URL('..', import.meta.url))
const { platformSuffix } = require('../scripts/build-native.js')
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
 * plus a folder with `node`.
 */
function cleanEnv(shimDir) {
  const hasRust = (dir) => ['cargo', 'rustc', 'cargo.exe'].some((bin) => fs.existsSync(path.join(dir, bin)))
  const dirs = (process.env.PATH || '').split(path.delimiter).filter((d) => d && !hasRust(d))
  fs.mkdirSync(shimDir, { recursive: true })
  fs.symlinkSync(process.execPath, path.join(shimDir, 'node'))
  const env = { HOME: os.homedir(), PATH: [shimDir, ...dirs].join(path.delimiter) }
  if (process.env.npm_config_cache) env.npm_config_cache = process.env.npm_config_cache
  if (process.env.TMPDIR) env.TMPDIR = process.env.TMPDIR
  return env
}

function run(command, args, options) {
  const r = spawnSync(command, args, { encoding: 'utf8', timeout: 90_000, ...options })
  return { code: r.status, stdout: r.stdout || '', stderr: r.stderr || '', error: r.error }
}

test('the packed tarballs install into an empty project without cargo, offline, and load', { skip: !hasPlatformPackage && `no npm/${suffix}`, timeout: 120_000 }, () => {
  const binary = path.join(repo, `quota-engine.${suffix}.node`)
  assert.ok(fs.existsSync(binary), `the built addon ${binary} (npm test builds it first)`)
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-packed-'))
  try {
    const env = cleanEnv(path.join(tmp, 'shim'))
    assert.ok(run('cargo', ['--version'], { env }).error, 'cargo is not reachable on the stripped PATH')
    const npm = (args, cwd) => run(process.execPath, [npmCli(), ...args], { cwd, env })
    const packs = path.join(tmp, 'packs')
    fs.mkdirSync(packs)

    // The main package: no binary, no Rust sources.
    const main = npm(['pack', '--ignore-scripts', '--json', '--pack-destination', packs], repo)
    assert.equal(main.code, 0, main.stderr)
    const [mainInfo] = JSON.parse(main.stdout)
    const files = mainInfo.files.map((f) => f.path)
    assert.deepEqual(files.filter((f) => f.endsWith('.node')), [], 'the main tarball carries no binary')
    assert.ok(!files.includes('Cargo.toml'), 'nor the Rust sources')
    for (const f of ['index.js', 'binding.js', 'bin/quota-engine.js', 'scripts/install.js', 'lib/surface.js']) assert.ok(files.includes(f), f)
    const manifest = JSON.parse(fs.readFileSync(path.join(repo, 'package.json'), 'utf8'))
    assert.equal(manifest.optionalDependencies[`@omniroute/quota-engine-${suffix}`], manifest.version)

    // The platform package, from a copy of npm/<suffix>/ with the binary placed as
    // `npm run build` places it (the debug or release build this tree already has).
    const platformDir = path.join(tmp, 'npm', suffix)
    fs.cpSync(path.join(repo, 'npm', suffix), platformDir, { recursive: true, filter: (src) => !src.endsWith('.node') })
    placeBinary({ root: repo, npmDir: path.join(tmp, 'npm'), suffix })
    const platform = npm(['pack', '--json', '--pack-destination', packs], platformDir)
    assert.equal(platform.code, 0, platform.stderr)
    const [platformInfo] = JSON.parse(platform.stdout)
    assert.equal(platformInfo.name, `@omniroute/quota-engine-${suffix}`)
    assert.deepEqual(platformInfo.files.map((f) => f.path).filter((f) => f.endsWith('.node')), [`quota-engine.${suffix}.node`])

    // An empty project, offline: only the two tarballs and the npm cache.
    const app = path.join(tmp, 'app')
    fs.mkdirSync(app)
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }))
    const install = npm(
      ['install', '--offline', '--no-audit', '--no-fund', '--foreground-scripts', path.join(packs, mainInfo.filename), path.join(packs, platformInfo.filename)],
      app,
    )
    assert.equal(install.code, 0, install.stdout + install.stderr)
    assert.match(install.stdout, new RegExp(`quota-engine: using the prebuilt binary for ${suffix}`))
    const installed = path.join(app, 'node_modules', '@omniroute', 'quota-engine')
    assert.deepEqual(fs.readdirSync(installed).filter((f) => f.endsWith('.node')), [], 'nothing was built into the main package')

    const script = `
      const q = require('@omniroute/quota-engine')
      const key = { poolId: 'p', unit: 'requests', window: 'hourly' }
      const decision = q.decideFairShare({
        dimensions: [{ key, limit: 1500, consumedTotal: 900, globalUsedPercent: 0.6 }],
        allocation: { weight: 25, policy: 'hard' },
        consumedByThisKey: { [q.dimensionKeyToString(key)]: 400 },
        saturationThreshold: 0.5,
      })
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
    const bin = run(path.join(app, 'node_modules', '.bin', 'quota-engine'), ['--version'], { cwd: app, env })
    assert.equal(bin.stdout.trim(), manifest.version, bin.stderr)
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true })
  }
})
