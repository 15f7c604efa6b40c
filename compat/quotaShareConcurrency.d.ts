export { quotaShareConcurrencyKey, acquireQuotaShareConcurrencySlot } from '../lib/quotaShareConcurrency'
export type { QuotaShareQueueOptions, QuotaShareLogger } from '../lib/quotaShareConcurrency'
export type { QuotaShareQueueOptions as QuotaShareSlotOptions } from '../lib/quotaShareConcurrency'
