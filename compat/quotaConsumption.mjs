import entry from './quotaConsumption.js'

export const {
  getBucket,
  incrementBucket,
  getPair,
  listConsumptionForPool,
  sumPoolDimension,
  gcOlderThan,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
