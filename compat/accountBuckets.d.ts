export { SATURATION_THRESHOLD_PCT, isBucketSaturated, recordUsage, updateAccountBuckets, _clearBucketsForTest, _bucketCountForTest } from '../binding'
export type { AccountQuota } from '../binding'
