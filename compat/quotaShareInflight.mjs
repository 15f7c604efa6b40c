import entry from './quotaShareInflight.js'

export const {
  DEFAULT_LEASE_MS,
  incrementInflight,
  decrementInflight,
  getInflight,
  _clearInflightForTest,
  _inflightSizeForTest,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
