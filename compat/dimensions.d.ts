export { QuotaUnitSchema, QuotaWindowSchema, PolicySchema, QuotaDimensionSchema, PoolAllocationSchema, ProviderPlanSchema, QuotaPoolSchema } from '../lib/dimensions'
export { WINDOW_MS, dimensionKeyToString } from '../binding'
