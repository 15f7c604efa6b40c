'use strict'
// Drop-in for the host's src/lib/quota/planRegistry.ts.
const native = require('../binding.js')

module.exports = { getKnownPlan: native.getKnownPlan, knownProviders: native.knownProviders }
