import type { z } from 'zod'

export { WINDOW_MS, dimensionKeyToString } from '../binding'

export declare const QuotaUnitSchema: z.ZodEnum<{ percent: 'percent'; requests: 'requests'; tokens: 'tokens'; usd: 'usd' }>
export declare const QuotaWindowSchema: z.ZodEnum<{ '5h': '5h'; hourly: 'hourly'; daily: 'daily'; weekly: 'weekly'; monthly: 'monthly' }>
export declare const PolicySchema: z.ZodEnum<{ hard: 'hard'; soft: 'soft'; burst: 'burst' }>
export declare const QuotaDimensionSchema: z.ZodObject<{
  unit: typeof QuotaUnitSchema
  window: typeof QuotaWindowSchema
  limit: z.ZodNumber
}>
export declare const PoolAllocationSchema: z.ZodObject<{
  apiKeyId: z.ZodString
  weight: z.ZodNumber
  capValue: z.ZodOptional<z.ZodNumber>
  capUnit: z.ZodOptional<typeof QuotaUnitSchema>
  policy: typeof PolicySchema
}>
export declare const ProviderPlanSchema: z.ZodObject<{
  connectionId: z.ZodNullable<z.ZodString>
  provider: z.ZodString
  dimensions: z.ZodArray<typeof QuotaDimensionSchema>
  source: z.ZodEnum<{ auto: 'auto'; manual: 'manual' }>
}>
export declare const QuotaPoolSchema: z.ZodObject<{
  id: z.ZodString
  connectionId: z.ZodString
  name: z.ZodString
  createdAt: z.ZodString
  allocations: z.ZodDefault<z.ZodArray<typeof PoolAllocationSchema>>
}>
