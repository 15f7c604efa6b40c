'use strict'
// Drop-in for the host's open-sse/services/combo/quotaShareStrategy.ts.
const strategy = require('../lib/quotaShareStrategy.js')

module.exports = {
  selectQuotaShareTarget: strategy.selectQuotaShareTarget,
  _clearDrrStateForTest: strategy._clearDrrStateForTest,
  _getDrrDeficitForTest: strategy._getDrrDeficitForTest,
}
