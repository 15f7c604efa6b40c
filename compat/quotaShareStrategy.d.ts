export { selectQuotaShareTarget } from '../lib/quotaShareStrategy'
export { _clearDrrStateForTest, _getDrrDeficitForTest } from '../binding'
export type { QuotaShareTarget, QuotaShareSelectOptions, QuotaShareSelection } from '../lib/quotaShareStrategy'
export type { QuotaShareSelectOptions as QuotaShareOptions, QuotaShareSelection as QuotaShareResult } from '../lib/quotaShareStrategy'
