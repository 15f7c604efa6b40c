'use strict'
// Drop-in for the host's src/lib/quota/fairShare.ts.
const native = require('../binding.js')

module.exports = { decideFairShare: native.decideFairShare }
