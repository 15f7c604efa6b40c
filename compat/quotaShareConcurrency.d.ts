export { quotaShareConcurrencyKey, acquireQuotaShareConcurrencySlot } from '../lib/quotaShareConcurrency'
