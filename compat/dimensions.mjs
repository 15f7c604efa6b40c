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
