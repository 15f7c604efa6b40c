import entry from './quotaShareConcurrency.js'

export const {
  quotaShareConcurrencyKey,
  acquireQuotaShareConcurrencySlot,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
