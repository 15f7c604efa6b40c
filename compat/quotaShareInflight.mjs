import entry from './quotaShareInflight.js'

export const {
  DEFAULT_LEASE_MS,
  incrementInflight,
  decrementInflight,
  getInflight,
  _clearInflightForTest,
  _inflightSizeForTest,
} = entry
