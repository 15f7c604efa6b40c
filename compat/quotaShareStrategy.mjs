import entry from './quotaShareStrategy.js'

export const {
  selectQuotaShareTarget,
  _clearDrrStateForTest,
  _getDrrDeficitForTest,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
