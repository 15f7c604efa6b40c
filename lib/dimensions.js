'use strict'
// The zod schemas of the host's src/lib/quota/dimensions.ts (compat/dimensions): the zod 4 schemas of docs/contract.md §1
// (zod is a peer dependency: the host brings its own), plus WINDOW_MS from the native core
// and dimensionKeyToString (lib/dimensionKey.js).
const { z } = require('zod')
const native = require('./native.js')
const { dimensionKeyToString } = require('./dimensionKey.js')

const QuotaUnitSchema = z.enum(['percent', 'requests', 'tokens', 'usd'])
const QuotaWindowSchema = z.enum(['5h', 'hourly', 'daily', 'weekly', 'monthly'])
const PolicySchema = z.enum(['hard', 'soft', 'burst'])

const QuotaDimensionSchema = z.object({
  unit: QuotaUnitSchema,
  window: QuotaWindowSchema,
  limit: z.number().positive(),
})

const PoolAllocationSchema = z.object({
  apiKeyId: z.string().min(1),
  weight: z.number().min(0).max(100),
  capValue: z.number().positive().optional(),
  capUnit: QuotaUnitSchema.optional(),
  policy: PolicySchema,
})

const ProviderPlanSchema = z.object({
  connectionId: z.string().nullable(),
  provider: z.string().min(1),
  dimensions: z.array(QuotaDimensionSchema).min(1),
  source: z.enum(['auto', 'manual']),
})

const QuotaPoolSchema = z.object({
  id: z.string().min(1),
  connectionId: z.string().min(1),
  name: z.string().min(1),
  createdAt: z.string().datetime(),
  allocations: z.array(PoolAllocationSchema).default([]),
})

module.exports = {
  QuotaUnitSchema,
  QuotaWindowSchema,
  PolicySchema,
  QuotaDimensionSchema,
  PoolAllocationSchema,
  ProviderPlanSchema,
  QuotaPoolSchema,
  WINDOW_MS: native.WINDOW_MS,
  dimensionKeyToString,
}
