import entry from './quotaConsumption.js'

export const {
  getBucket,
  incrementBucket,
  getPair,
  listConsumptionForPool,
  sumPoolDimension,
  gcOlderThan,
} = entry
