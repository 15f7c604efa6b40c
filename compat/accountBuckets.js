'use strict'
// Drop-in for the host's src/lib/quota/accountBuckets.ts.
const native = require('../binding.js')

module.exports = {
  SATURATION_THRESHOLD_PCT: native.SATURATION_THRESHOLD_PCT,
  isBucketSaturated: native.isBucketSaturated,
  recordUsage: native.recordUsage,
  updateAccountBuckets: native.updateAccountBuckets,
  _clearBucketsForTest: native._clearBucketsForTest,
  _bucketCountForTest: native._bucketCountForTest,
}
