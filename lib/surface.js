'use strict'
// The package's public surface, listed once. `node scripts/surface.js` writes index.js,
// index.mjs, the export list of index.d.ts, compat/<entry>.{js,mjs,d.ts} and package.json's
// `exports` from it; __test__/surface.test.mjs checks every one of them against it and
// against what `require()` and `import` really give.

// The addon's calls that open the database, outside the hot path: lib/native.js hands
// over what they log as they return.
const OPENS_DATABASE = [
  'createPool', 'getPool', 'listPools', 'updatePool', 'upsertAllocations',
  'listAllocationsForApiKey', 'getProviderPlan', 'upsertProviderPlan', 'deleteProviderPlan', 'getModelCap',
  'setModelCap', 'deleteModelCap', 'importLegacyPools', 'getBucket', 'incrementBucket', 'getPair',
  'sumPoolDimension', 'listConsumptionForPool', 'gcOlderThan',
]

// Where each name of the main entry comes from: `native` (the addon), or a module of lib/.
const MAIN = {
  native: [
    // docs/contract.md §1, §3, §6, §9: the pure core (docs/api.md#the-pure-functions).
    'WINDOW_MS', 'decideFairShare', 'resolvePlan', 'computeBurnRate', 'computeBurnRateFromWindow',
    // §4–§5: the database, metadata and the counter table.
    'closeQuotaDb', ...OPENS_DATABASE,
    // §7–§8.
    '_clearSaturationCache', '_clearRateLimitHeaders',
    // Beyond the contract: the Prometheus text of the engine's counters.
    'metrics',
    // §10: the combo scheduler's state.
    'QUOTA_SHARE_STRATEGY', 'DEFAULT_LEASE_MS', 'incrementInflight', 'decrementInflight', 'getInflight',
    '_clearInflightForTest', '_inflightSizeForTest', 'SATURATION_THRESHOLD_PCT', 'recordUsage',
    'isBucketSaturated', 'updateAccountBuckets', '_clearBucketsForTest', '_bucketCountForTest',
    '_clearDrrStateForTest', '_getDrrDeficitForTest',
  ],
  // The pure calls whose answers the glue remembers (docs/api.md#the-pure-functions).
  dimensionKey: ['dimensionKeyToString'],
  plans: ['getKnownPlan', 'knownProviders'],
  stores: [
    'SqliteQuotaStore', 'getSqliteQuotaStore', 'getQuotaStore', 'getQuotaStoreSync', 'resetQuotaStoreSingleton',
    'RedisQuotaStore', 'getRedisQuotaStore', 'resetRedisQuotaStore', 'gcConsumption', 'deletePool',
  ],
  redisQuotaStore: ['getRedisClient', 'resetRedisClient'],
  writeBuffer: ['closeQuotaDb', 'flushQuotaWrites'],
  enforce: [
    'enforceQuotaShare', 'recordConsumption', 'releaseReservation', 'scheduleRecordConsumption',
    'buildConsumptionCost', 'recordStreamingConsumption', 'softPenaltyFactor',
  ],
  saturation: ['getSaturation', 'storeRateLimitHeaders', 'getTokenHeaderSaturation'],
  host: ['installHost', 'setLogger', 'setQuotaEventListener', 'registerSaturationFetcher'],
  quotaShareStrategy: ['selectQuotaShareTarget'],
  quotaShareConcurrency: ['quotaShareConcurrencyKey', 'acquireQuotaShareConcurrencySlot'],
}

// closeQuotaDb is the JS one (it commits the buffer and forwards the engine's logs).
MAIN.native = MAIN.native.filter((name) => name !== 'closeQuotaDb')

// The drop-in entries (docs/contract.md, appendix): entry → the module their names come
// from, and the names — exactly these, no more.
const COMPAT = {
  fairShare: ['native', ['decideFairShare']],
  dimensions: ['dimensions', ['QuotaUnitSchema', 'QuotaWindowSchema', 'PolicySchema', 'QuotaDimensionSchema', 'PoolAllocationSchema', 'ProviderPlanSchema', 'QuotaPoolSchema', 'WINDOW_MS', 'dimensionKeyToString']],
  burnRate: ['native', ['computeBurnRateFromWindow', 'computeBurnRate']],
  planRegistry: ['plans', ['getKnownPlan', 'knownProviders']],
  planResolver: ['native', ['resolvePlan']],
  accountBuckets: ['native', ['SATURATION_THRESHOLD_PCT', 'isBucketSaturated', 'recordUsage', 'updateAccountBuckets', '_clearBucketsForTest', '_bucketCountForTest']],
  saturationSignals: ['saturation', ['getSaturation', 'storeRateLimitHeaders', 'getTokenHeaderSaturation', '_clearRateLimitHeaders', '_clearSaturationCache', '__setAnthropicSaturationDepsForTests', '__setGenericUsageFetcherForTests']],
  storeFactory: ['stores', ['getQuotaStore', 'getQuotaStoreSync', 'resetQuotaStoreSingleton']],
  sqliteQuotaStore: ['stores', ['SqliteQuotaStore', 'getSqliteQuotaStore']],
  redisQuotaStore: ['redisQuotaStore', ['RedisQuotaStore', 'getRedisClient', 'resetRedisClient', 'getRedisQuotaStore', 'resetRedisQuotaStore']],
  enforce: ['enforce', ['enforceQuotaShare', 'recordConsumption']],
  spendRecorder: ['enforce', ['scheduleRecordConsumption', 'buildConsumptionCost', 'recordStreamingConsumption']],
  quotaConsumption: ['native', ['getBucket', 'incrementBucket', 'getPair', 'listConsumptionForPool', 'sumPoolDimension', 'gcOlderThan']],
  quotaShareStrategy: ['quotaShareStrategy', ['selectQuotaShareTarget', '_clearDrrStateForTest', '_getDrrDeficitForTest']],
  quotaShareInflight: ['native', ['DEFAULT_LEASE_MS', 'incrementInflight', 'decrementInflight', 'getInflight', '_clearInflightForTest', '_inflightSizeForTest']],
  quotaShareConcurrency: ['quotaShareConcurrency', ['quotaShareConcurrencyKey', 'acquireQuotaShareConcurrencySlot']],
  host: ['host', ['installHost']],
}

/** Every name of the main entry, in order. */
function mainNames() {
  return Object.values(MAIN).flat()
}

module.exports = { MAIN, COMPAT, mainNames, OPENS_DATABASE }
