export { SATURATION_THRESHOLD_PCT, isBucketSaturated, recordUsage, updateAccountBuckets, _clearBucketsForTest, _bucketCountForTest } from '../binding'
export type { AccountQuota, AccountQuota as UsageQuotaSlim } from '../binding'
export interface ClaudeUsageResult { quotas?: Record<string, import('../binding').AccountQuota | undefined> }
