import entry from './enforce.js'

export const {
  enforceQuotaShare,
  recordConsumption,
} = entry
