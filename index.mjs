// ES module entry: the same exports as index.js,
// re-exported by name so that `import { decideFairShare } from '@omniroute/quota-engine'`
// works for every export, including WINDOW_MS, which the native module defines itself.
import native from './index.js'

export const {
  WINDOW_MS,
  computeBurnRate,
  computeBurnRateFromWindow,
  decideFairShare,
  dimensionKeyToString,
  getKnownPlan,
  knownProviders,
  // CONTRACT §10: the combo scheduler.
  QUOTA_SHARE_STRATEGY,
  DEFAULT_LEASE_MS,
  incrementInflight,
  decrementInflight,
  getInflight,
  _clearInflightForTest,
  _inflightSizeForTest,
  SATURATION_THRESHOLD_PCT,
  recordUsage,
  isBucketSaturated,
  updateAccountBuckets,
  _clearBucketsForTest,
  _bucketCountForTest,
  selectQuotaShareTarget,
  _clearDrrStateForTest,
  _getDrrDeficitForTest,
  quotaShareConcurrencyKey,
  acquireQuotaShareConcurrencySlot,
} = native
