export { QuotaUnitSchema, QuotaWindowSchema, PolicySchema, QuotaDimensionSchema, PoolAllocationSchema, ProviderPlanSchema, QuotaPoolSchema, dimensionKeyToString } from '../lib/dimensions'
export { WINDOW_MS } from '../binding'
export type { QuotaUnit, QuotaWindow, Policy, QuotaDimension, PoolAllocation, ProviderPlan, QuotaPool, DimensionKey } from '../binding'
