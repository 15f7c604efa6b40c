// Which prebuilt platform package matches this machine: the suffix napi-rs names it by
// (`linux-x64-gnu`, `linux-arm64-musl`, `darwin-arm64`, `win32-x64-msvc`, …) and the
// package `@omniroute/quota-engine-<suffix>`. Detects musl the way the generated loader
// (binding.js) does, so the name given here is the one it tries to load. No dependencies:
// used at install time (scripts/install.js), at require time (lib/native.js, only when no
// binary loads: noBinaryError), by `quota-engine copy-binary` and by the contributor scripts.
'use strict'

const fs = require('node:fs')
const path = require('node:path')

const PACKAGE_PREFIX = '@omniroute/quota-engine-'

function muslFromFilesystem() {
  try {
    return fs.readFileSync('/usr/bin/ldd', 'utf8').includes('musl')
  } catch {
    return null
  }
}

function muslFromReport() {
  const report = typeof process.report?.getReport === 'function' ? process.report.getReport() : null
  if (!report) return null
  if (report.header && report.header.glibcVersionRuntime) return false
  if (Array.isArray(report.sharedObjects) && report.sharedObjects.some((f) => f.includes('libc.musl-') || f.includes('ld-musl-'))) {
    return true
  }
  return false
}

function muslFromChildProcess() {
  try {
    return require('node:child_process').execSync('ldd --version', { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).includes('musl')
  } catch {
    return false
  }
}

/** Whether this Linux runs on musl (Alpine) rather than glibc. */
function isMusl() {
  if (process.platform !== 'linux') return false
  const fromFs = muslFromFilesystem()
  if (fromFs !== null) return fromFs
  const fromReport = muslFromReport()
  if (fromReport !== null) return fromReport
  return muslFromChildProcess()
}

/** This machine's suffix: `<platform>-<arch>[-<abi>]`, as napi-rs names the packages. */
function platformSuffix({ platform = process.platform, arch = process.arch, musl } = {}) {
  if (platform === 'linux') return `linux-${arch}-${(musl ?? isMusl()) ? 'musl' : 'gnu'}`
  if (platform === 'win32') return `win32-${arch}-msvc`
  return `${platform}-${arch}`
}

/** The platform package for a suffix. */
function platformPackage(suffix = platformSuffix()) {
  return `${PACKAGE_PREFIX}${suffix}`
}

/** The suffixes the release publishes: the main package's optional dependencies. */
function publishedSuffixes() {
  const { optionalDependencies = {} } = require('../package.json')
  return Object.keys(optionalDependencies)
    .filter((name) => name.startsWith(PACKAGE_PREFIX))
    .map((name) => name.slice(PACKAGE_PREFIX.length))
}

const root = path.resolve(__dirname, '..')

function resolveFrom(request) {
  try {
    return require.resolve(request, { paths: [root] })
  } catch {
    return null
  }
}

function firstLine(err) {
  return String((err && err.message) || err).split('\n')[0]
}

/**
 * The error to throw when binding.js found no binary it could load: which platform this
 * is, which package should have been installed, and how to fix it. `err.code` is
 * ERR_QUOTA_NO_BINARY; `err.cause` is the loader's error, whose `cause` chain holds every
 * load attempt's error. The loader's own override, NAPI_RS_NATIVE_LIBRARY_PATH, is read
 * here, beside the loader's other install-time facts, and not by lib/.
 */
/**
 * Whether the package's code runs from a bundler's output (Next.js' webpack or Turbopack,
 * esbuild, Rollup…) rather than from where it was installed: `dir` (lib/'s own
 * `__dirname`) has no package.json of this package above it, or webpack's runtime is there.
 */
function isBundled(dir) {
  if (typeof __webpack_require__ === 'function') return true
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, '..', 'package.json'), 'utf8')).name !== '@omniroute/quota-engine'
  } catch {
    return true
  }
}

/** The error for a bundled load: the binary is there, the bundler hid it; say the setting. */
function bundledError(loaderError) {
  const err = new Error(
    '@omniroute/quota-engine was bundled: a bundler copied its JavaScript into its own output, ' +
      'where the native binary it loads cannot be found. It must be loaded by Node from node_modules. ' +
      'Next.js: add "@omniroute/quota-engine" to serverExternalPackages in next.config ' +
      '(serverExternalPackages: ["@omniroute/quota-engine"]); webpack: externals; esbuild: ' +
      '--external:@omniroute/quota-engine; Rollup or Vite: external. ' +
      `(The loader said: ${firstLine(loaderError.cause || loaderError)})`,
    { cause: loaderError },
  )
  err.code = 'ERR_QUOTA_BUNDLED'
  return err
}

function noBinaryError(loaderError) {
  const suffix = platformSuffix()
  const packageName = platformPackage(suffix)
  const fromSource = 'or build it from source: clone the repository, install Rust (https://rustup.rs) and run `npm run build`'
  let message
  if (process.env.NAPI_RS_NATIVE_LIBRARY_PATH) {
    message =
      `@omniroute/quota-engine: the binary NAPI_RS_NATIVE_LIBRARY_PATH names (${process.env.NAPI_RS_NATIVE_LIBRARY_PATH}) ` +
      `could not be loaded on ${suffix}: ${firstLine(loaderError.cause || loaderError)}. Unset it to use ${packageName}, ${fromSource}.`
  } else if (!publishedSuffixes().includes(suffix)) {
    message =
      `@omniroute/quota-engine: no prebuilt binary is published for ${suffix} (so there is no ${packageName} to install); ` +
      `build it from source: clone the repository, install Rust (https://rustup.rs) and run \`npm run build\`.`
  } else {
    const installed = resolveFrom(packageName)
    if (installed) {
      let why = loaderError
      try {
        require(installed)
      } catch (err) {
        why = err
      }
      message =
        `@omniroute/quota-engine: ${packageName} is installed (${installed}) but its binary does not load on ${suffix}: ` +
        `${firstLine(why)}. Reinstall it (npm install --include=optional), ${fromSource}.`
    } else {
      message =
        `@omniroute/quota-engine: no native binary for ${suffix}: the package ${packageName} is not installed. ` +
        `It is an optional dependency, which npm skips with --omit=optional, with a lockfile made on another platform, ` +
        `or through https://github.com/npm/cli/issues/4828. Fix: npm install --include=optional ` +
        `(if it is still missing, delete node_modules and package-lock.json and install again), ${fromSource}.`
    }
  }
  const err = new Error(message)
  // Assigned rather than passed as `{ cause }`, like binding.js, for older loaders.
  err.cause = loaderError
  err.code = 'ERR_QUOTA_NO_BINARY'
  err.platform = suffix
  err.packageName = packageName
  return err
}

module.exports = { PACKAGE_PREFIX, isMusl, platformSuffix, platformPackage, publishedSuffixes, noBinaryError, isBundled, bundledError }
