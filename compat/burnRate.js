'use strict'
// Drop-in for the host's src/lib/quota/burnRate.ts.
const native = require('../index.js')

module.exports = {
  computeBurnRateFromWindow: native.computeBurnRateFromWindow,
  computeBurnRate: native.computeBurnRate,
}
