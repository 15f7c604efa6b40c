'use strict'
// `quota-engine copy-binary <standalone-dir>`: copies the platform package that holds this
// machine's binary (@omniroute/quota-engine-<platform>, an optional dependency) into
// `<standalone-dir>/node_modules/@omniroute/`, for deployments whose file tracing leaves it
// out — Next.js `output: 'standalone'` (docs/nextjs-standalone.md). Works without loading
// the binary in this process (the build machine may not run it), then checks, in a child
// process, that the standalone tree loads it.
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { platformSuffix, platformPackage, publishedSuffixes } = require('../scripts/platform.js')

/** The installed @omniroute/quota-engine this command belongs to. */
const packageRoot = path.resolve(__dirname, '..')

class CopyError extends Error {
  constructor(message, exitCode = 1) {
    super(message)
    this.exitCode = exitCode
  }
}

/** The installed platform package for `suffix`: its folder and manifest, or a CopyError. */
function findPlatformPackage(suffix) {
  const name = platformPackage(suffix)
  let manifestPath
  try {
    manifestPath = require.resolve(`${name}/package.json`, { paths: [packageRoot] })
  } catch {
    const hint =
      suffix === platformSuffix()
        ? 'npm install --include=optional'
        : `install it for that platform, e.g. npm install --include=optional ${installFlags(suffix)}`
    throw new CopyError(`${name} is not installed next to ${packageRoot} (${hint})`)
  }
  const dir = fs.realpathSync(path.dirname(manifestPath))
  const manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8'))
  if (!manifest.main || !fs.existsSync(path.join(dir, manifest.main))) {
    throw new CopyError(`${name} at ${dir} has no binary (${manifest.main || 'no "main"'}); reinstall it`)
  }
  return { name, dir, manifest }
}

/** npm's flags that install another platform's optional dependencies. */
function installFlags(suffix) {
  const [os, cpu, abi] = suffix.split('-')
  const libc = abi === 'musl' ? ' --libc=musl' : abi === 'gnu' ? ' --libc=glibc' : ''
  return `--os=${os} --cpu=${cpu}${libc}`
}

/** Whether the standalone tree has the main package (traced by Next.js), at any layout. */
function hasMainPackage(standalone) {
  const modules = path.join(standalone, 'node_modules')
  if (fs.existsSync(path.join(modules, '@omniroute', 'quota-engine', 'package.json'))) return true
  try {
    return fs.readdirSync(path.join(modules, '.pnpm')).some((d) => d.startsWith('@omniroute+quota-engine@'))
  } catch {
    return false
  }
}

/**
 * Copies the package into `<standalone>/node_modules/@omniroute/<name>/`, replacing any
 * earlier copy: the files go to a temporary folder first, which is then renamed into place.
 * Node resolves it from there for any layout of the main package under that node_modules
 * (npm's flat one, or pnpm's `.pnpm/…/node_modules/@omniroute/quota-engine`).
 */
function copyPackage(source, standalone) {
  const scope = path.join(standalone, 'node_modules', '@omniroute')
  fs.mkdirSync(scope, { recursive: true })
  const destination = path.join(scope, path.basename(source.name))
  const temporary = `${destination}.${process.pid}.tmp`
  fs.rmSync(temporary, { recursive: true, force: true })
  fs.cpSync(source.dir, temporary, { recursive: true, dereference: true, filter: (src) => path.basename(src) !== 'node_modules' })
  fs.rmSync(destination, { recursive: true, force: true })
  fs.renameSync(temporary, destination)
  return destination
}

/** Loads the copy the way the deployed server will: `require` from the standalone tree. */
function verify(standalone, destination, withMain) {
  const script = withMain
    ? "const q = require(require.resolve('@omniroute/quota-engine', { paths: [process.argv[1]] })); if (typeof q.decideFairShare !== 'function') throw new Error('no decideFairShare')"
    : "const b = require(process.argv[2]); if (typeof b.decideFairShare !== 'function') throw new Error('no decideFairShare')"
  const r = spawnSync(process.execPath, ['-e', script, standalone, destination], {
    cwd: standalone,
    encoding: 'utf8',
    env: { ...process.env, NAPI_RS_NATIVE_LIBRARY_PATH: '' },
    timeout: 30_000,
  })
  if (r.status !== 0) {
    const why = (r.stderr || (r.error && r.error.message) || '').trim().split('\n').find((l) => /Error|error/.test(l)) || `exit ${r.status}`
    throw new CopyError(`copied to ${destination}, but loading it from ${standalone} failed: ${why}`)
  }
}

/** The `copy-binary` command; resolves to the exit code. */
function copyBinaryCommand(dir, options) {
  const standalone = path.resolve(dir)
  if (!fs.existsSync(standalone) || !fs.statSync(standalone).isDirectory()) {
    throw new CopyError(`${standalone} is not a folder (give the standalone output, e.g. .next/standalone)`, 2)
  }
  const suffix = options.platform || platformSuffix()
  if (!publishedSuffixes().includes(suffix)) {
    throw new CopyError(`no prebuilt binary is published for ${suffix} (published: ${publishedSuffixes().join(', ')})`, 2)
  }
  const source = findPlatformPackage(suffix)
  const { version } = require('../package.json')
  const warnings = []
  if (source.manifest.version !== version) {
    warnings.push(`${source.name} is ${source.manifest.version}, @omniroute/quota-engine is ${version}: reinstall so they match`)
  }
  const withMain = hasMainPackage(standalone)
  if (!withMain) {
    warnings.push(
      `${standalone}/node_modules has no @omniroute/quota-engine: is the package traced? ` +
        "(Next.js: add it to serverExternalPackages and import it from server code)",
    )
  }
  const destination = copyPackage(source, standalone)
  const native = suffix === platformSuffix()
  if (native && options.verify) verify(standalone, destination, withMain)
  const loaded = native && options.verify
  if (options.json) {
    process.stdout.write(`${JSON.stringify({ package: source.name, version: source.manifest.version, from: source.dir, to: destination, loaded, warnings })}\n`)
  } else {
    for (const warning of warnings) process.stderr.write(`quota-engine: warning: ${warning}\n`)
    const check = loaded ? '; it loads from there' : native ? '' : ` (built for ${suffix}: not loaded on this ${platformSuffix()} machine)`
    process.stdout.write(`Copied ${source.name}@${source.manifest.version} to ${destination}${check}.\n`)
  }
  return 0
}

/** Adds the command to the `quota-engine` program (bin/quota-engine.js). */
function register(program) {
  program
    .command('copy-binary')
    .description("copy this platform's prebuilt binary package into a standalone deployment's node_modules (Next.js output: 'standalone')")
    .argument('<standalone-dir>', 'the standalone output folder, e.g. .next/standalone')
    .option('--platform <suffix>', "another platform's package, installed here beforehand (e.g. linux-arm64-musl)")
    .option('--no-verify', 'do not load the copy from the standalone tree afterwards')
    .option('--json', 'machine-readable output')
    .addHelpText(
      'after',
      `
Run it after \`next build\`, on the machine (or in the Docker stage) whose platform the
deployment runs on. Copies node_modules/@omniroute/quota-engine-<platform> into
<standalone-dir>/node_modules/@omniroute/, then loads it from there in a child process.
Exit code: 0 copied, 1 the package is missing or does not load, 2 bad arguments.

Examples:
  npx quota-engine copy-binary .next/standalone
  npx quota-engine copy-binary .next/standalone --platform linux-x64-musl`,
    )
    .action((dir, options) => {
      try {
        process.exitCode = copyBinaryCommand(dir, options)
      } catch (err) {
        process.stderr.write(`quota-engine: ${err && typeof err.exitCode === 'number' ? err.message : err && err.stack}\n`)
        process.exitCode = err && typeof err.exitCode === 'number' ? err.exitCode : 1
      }
    })
}

module.exports = { register, copyBinaryCommand }
