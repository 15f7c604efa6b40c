export { selectQuotaShareTarget } from '../lib/quotaShareStrategy'
export { _clearDrrStateForTest, _getDrrDeficitForTest } from '../binding'
export type { QuotaShareTarget, QuotaShareSelectOptions, QuotaShareSelection } from '../lib/quotaShareStrategy'
export type { QuotaShareSelectOptions as QuotaShareOptions } from '../lib/quotaShareStrategy'
export type QuotaShareResult<T extends import('../lib/quotaShareStrategy').QuotaShareTarget = import('../lib/quotaShareStrategy').QuotaShareTarget> = import('../lib/quotaShareStrategy').QuotaShareSelection<T>
