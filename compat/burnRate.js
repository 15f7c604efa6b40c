'use strict'
// Drop-in for the host's src/lib/quota/burnRate.ts.
const native = require('../binding.js')

module.exports = {
  computeBurnRateFromWindow: native.computeBurnRateFromWindow,
  computeBurnRate: native.computeBurnRate,
}
