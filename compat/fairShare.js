'use strict'
// Drop-in for the host's src/lib/quota/fairShare.ts.
const native = require('../index.js')

module.exports = { decideFairShare: native.decideFairShare }
