import entry from './accountBuckets.js'

export const {
  SATURATION_THRESHOLD_PCT,
  isBucketSaturated,
  recordUsage,
  updateAccountBuckets,
  _clearBucketsForTest,
  _bucketCountForTest,
} = entry
