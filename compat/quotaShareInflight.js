'use strict'
// Drop-in for the host's open-sse/services/combo/quotaShareInflight.ts.
const native = require('../binding.js')

module.exports = {
  DEFAULT_LEASE_MS: native.DEFAULT_LEASE_MS,
  incrementInflight: native.incrementInflight,
  decrementInflight: native.decrementInflight,
  getInflight: native.getInflight,
  _clearInflightForTest: native._clearInflightForTest,
  _inflightSizeForTest: native._inflightSizeForTest,
}
