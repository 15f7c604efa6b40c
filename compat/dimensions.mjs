import entry from './dimensions.js'

export const {
  QuotaUnitSchema,
  QuotaWindowSchema,
  PolicySchema,
  QuotaDimensionSchema,
  PoolAllocationSchema,
  ProviderPlanSchema,
  QuotaPoolSchema,
  WINDOW_MS,
  dimensionKeyToString,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
