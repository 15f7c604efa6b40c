#!/usr/bin/env node
// The last step of `npm run build`: copies the addon that `napi build --platform` left
// beside package.json (`quota-engine.<suffix>.node`) into `npm/<suffix>/`, the folder of
// the platform package `@omniroute/quota-engine-<suffix>` that the main package lists as
// an optional dependency. `npm pack` there gives the tarball that installs without Rust.
'use strict'

const fs = require('node:fs')
const path = require('node:path')
const { platformSuffix } = require('./build-native.js')

/**
 * Copies `quota-engine.<suffix>.node` from `root` into `<npmDir>/<suffix>/` and returns
 * its new path. Throws when the binary or the platform package is missing.
 */
function placeBinary({ root = path.resolve(__dirname, '..'), npmDir = path.join(root, 'npm'), suffix = platformSuffix() } = {}) {
  const file = `quota-engine.${suffix}.node`
  const source = path.join(root, file)
  const packageDir = path.join(npmDir, suffix)
  if (!fs.existsSync(source)) throw new Error(`no ${file} in ${root}: build it first (npm run build)`)
  const manifest = path.join(packageDir, 'package.json')
  if (!fs.existsSync(manifest)) {
    throw new Error(`no platform package for ${suffix} in ${npmDir} (package.json "napi.targets", then npx napi create-npm-dirs)`)
  }
  const { main } = JSON.parse(fs.readFileSync(manifest, 'utf8'))
  if (main !== file) throw new Error(`${manifest}: "main" is ${JSON.stringify(main)}, expected ${JSON.stringify(file)}`)
  const destination = path.join(packageDir, file)
  const temporary = `${destination}.${process.pid}.tmp`
  fs.copyFileSync(source, temporary)
  fs.renameSync(temporary, destination)
  return destination
}

module.exports = { placeBinary }

if (require.main === module) {
  const destination = placeBinary()
  console.log(`placed ${path.relative(process.cwd(), destination)}`)
}
