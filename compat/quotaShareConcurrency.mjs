import entry from './quotaShareConcurrency.js'

export const {
  quotaShareConcurrencyKey,
  acquireQuotaShareConcurrencySlot,
} = entry
