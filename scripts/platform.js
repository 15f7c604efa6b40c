// Which prebuilt platform package matches this machine: the suffix napi-rs names it by
// (`linux-x64-gnu`, `linux-arm64-musl`, `darwin-arm64`, `win32-x64-msvc`, …) and the
// package `@omniroute/quota-engine-<suffix>`. Detects musl the way the generated loader
// (binding.js) does, so the name given here is the one it tries to load. No dependencies:
// used at install time (scripts/install.js), at require time (lib/native.js, only when no
// binary loads), by `quota-engine copy-binary` and by the contributor scripts.
'use strict'

const fs = require('node:fs')

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

module.exports = { PACKAGE_PREFIX, isMusl, platformSuffix, platformPackage, publishedSuffixes }
