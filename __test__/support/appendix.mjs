// The CONTRACT appendix: each drop-in entry and exactly the runtime names it exports.
export const APPENDIX = {
  fairShare: ['decideFairShare'],
  dimensions: [
    'QuotaUnitSchema',
    'QuotaWindowSchema',
    'PolicySchema',
    'QuotaDimensionSchema',
    'PoolAllocationSchema',
    'ProviderPlanSchema',
    'QuotaPoolSchema',
    'WINDOW_MS',
    'dimensionKeyToString',
  ],
  burnRate: ['computeBurnRateFromWindow', 'computeBurnRate'],
  planRegistry: ['getKnownPlan', 'knownProviders'],
}
