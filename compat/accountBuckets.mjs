import entry from './accountBuckets.js'

export const {
  SATURATION_THRESHOLD_PCT,
  isBucketSaturated,
  recordUsage,
  updateAccountBuckets,
  _clearBucketsForTest,
  _bucketCountForTest,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
