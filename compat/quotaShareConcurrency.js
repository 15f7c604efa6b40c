'use strict'
// Drop-in for the host's open-sse/services/combo/quotaShareConcurrency.ts.
const concurrency = require('../lib/quotaShareConcurrency.js')

module.exports = {
  quotaShareConcurrencyKey: concurrency.quotaShareConcurrencyKey,
  acquireQuotaShareConcurrencySlot: concurrency.acquireQuotaShareConcurrencySlot,
}
