import entry from './quotaShareStrategy.js'

export const {
  selectQuotaShareTarget,
  _clearDrrStateForTest,
  _getDrrDeficitForTest,
} = entry
