#!/usr/bin/env node
// The second half of `npm version` (package.json "version" script, after `napi version`
// has set npm/*/package.json to the new version): points the main package's
// optionalDependencies at the same version, so the published package installs the binaries
// published with it. binding.js carries the version too and is generated: this says when it
// is stale (the release workflow's build job fails on a stale one) — `npm run build`
// regenerates it. A contributor tool: not in the published package.
'use strict'

const fs = require('node:fs')
const path = require('node:path')
const { PACKAGE_PREFIX } = require('./platform.js')

const root = path.resolve(__dirname, '..')
const manifestPath = path.join(root, 'package.json')
const manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8'))
const { version } = manifest

for (const name of Object.keys(manifest.optionalDependencies || {})) {
  if (name.startsWith(PACKAGE_PREFIX)) manifest.optionalDependencies[name] = version
}
fs.writeFileSync(manifestPath, `${JSON.stringify(manifest, null, 2)}\n`)
console.log(`optionalDependencies → ${version}`)

const loader = fs.readFileSync(path.join(root, 'binding.js'), 'utf8')
if (!loader.includes(`expected ${version} but got`)) {
  console.log(`binding.js still names another version: run \`npm run build\` (it regenerates binding.js and binding.d.ts) and commit them with this release`)
}
