// Types of the main entry: exactly what index.js exports (the export lists are generated
// from lib/surface.js by scripts/surface.js), plus the types of their arguments.
import type { DimensionKey, PoolUsageSnapshot, QuotaUnit, QuotaWindow } from './binding'

// <surface: native>
export {
  WINDOW_MS, decideFairShare, resolvePlan, computeBurnRate, computeBurnRateFromWindow,
  createPool, getPool, listPools, updatePool, upsertAllocations, listAllocationsForApiKey,
  getProviderPlan, upsertProviderPlan, deleteProviderPlan, getModelCap, setModelCap,
  deleteModelCap, importLegacyPools, getBucket, incrementBucket, getPair, sumPoolDimension,
  listConsumptionForPool, gcOlderThan, _clearSaturationCache, _clearRateLimitHeaders, metrics,
  QUOTA_SHARE_STRATEGY, DEFAULT_LEASE_MS, incrementInflight, decrementInflight, getInflight,
  _clearInflightForTest, _inflightSizeForTest, SATURATION_THRESHOLD_PCT, recordUsage,
  isBucketSaturated, updateAccountBuckets, _clearBucketsForTest, _bucketCountForTest,
  _clearDrrStateForTest, _getDrrDeficitForTest,
} from './binding'
// </surface: native>
export type * from './binding'

/** The QuotaStore interface (docs/contract.md §4). */
export interface QuotaStore {
  consume(apiKeyId: string, dim: DimensionKey, cost: number): Promise<number>
  peek(apiKeyId: string, dim: DimensionKey): Promise<number>
  poolConsumedTotal(poolId: string, dim: DimensionKey): Promise<number>
  poolUsage(poolId: string): Promise<PoolUsageSnapshot>
  poolUsageWithDimensions(poolId: string, planDims: Array<{ unit: string; window: string; limit: number }>): Promise<PoolUsageSnapshot>
  clear(apiKeyId: string, dim: DimensionKey): Promise<void>
}
/** Counters in the host's storage.sqlite. */
export declare class SqliteQuotaStore implements QuotaStore {
  consume(apiKeyId: string, dim: DimensionKey, cost: number): Promise<number>
  peek(apiKeyId: string, dim: DimensionKey): Promise<number>
  poolConsumedTotal(poolId: string, dim: DimensionKey): Promise<number>
  poolUsage(poolId: string): Promise<PoolUsageSnapshot>
  poolUsageWithDimensions(poolId: string, planDims: Array<{ unit: string; window: string; limit: number }>): Promise<PoolUsageSnapshot>
  clear(apiKeyId: string, dim: DimensionKey): Promise<void>
}
export declare function getSqliteQuotaStore(): SqliteQuotaStore
/**
 * Counters on Redis (docs/contract.md §4, Redis), shared by every replica; metadata stays in SQLite.
 * Keys `omniroute:quota:<apiKeyId>:<dimensionKey>:<bucketIndex>` (hash-tagged per pool on a
 * cluster), values INCRBYFLOAT decimal strings, TTL `ceil(2 × windowMs / 1000)` s. Every
 * operation is one round trip, bounded by `QUOTA_STORE_REDIS_TIMEOUT_MS` (default 1000 ms);
 * an unreachable server rejects with `code: "ERR_QUOTA_REDIS_UNAVAILABLE"`.
 */
export declare class RedisQuotaStore implements QuotaStore {
  /** @param url `redis://[user:password@]host[:port][/db]`, or `redis+cluster://host:port[,host:port…]`. */
  constructor(url: string)
  readonly url: string
  consume(apiKeyId: string, dim: DimensionKey, cost: number): Promise<number>
  peek(apiKeyId: string, dim: DimensionKey): Promise<number>
  poolConsumedTotal(poolId: string, dim: DimensionKey): Promise<number>
  poolUsage(poolId: string): Promise<PoolUsageSnapshot>
  poolUsageWithDimensions(poolId: string, planDims: Array<{ unit: string; window: string; limit: number }>): Promise<PoolUsageSnapshot>
  clear(apiKeyId: string, dim: DimensionKey): Promise<void>
}
/** An ioredis-like client on the engine's shared connection to one URL; every call is bounded by the timeout. */
export interface RedisClient {
  readonly url: string
  readonly status: 'ready' | 'end'
  call(command: string, ...args: Array<string | number | Array<string | number>>): Promise<unknown>
  incrbyfloat(key: string, increment: number | string): Promise<string>
  expire(key: string, seconds: number): Promise<number>
  mget(...keys: Array<string | string[]>): Promise<Array<string | null>>
  eval(script: string, numKeys: number, ...keysAndArgs: Array<string | number>): Promise<unknown>
  del(...keys: Array<string | string[]>): Promise<number>
  ping(): Promise<string>
  quit(): Promise<'OK'>
}
/** The client of `url` (one per URL); connects lazily. Rejects with a RangeError for an unusable URL. */
export declare function getRedisClient(url: string): Promise<RedisClient>
/** Closes every client's connection; the next use connects again. */
export declare function resetRedisClient(): void
/** The RedisQuotaStore of `url` (one instance per URL). */
export declare function getRedisQuotaStore(url: string): RedisQuotaStore
/** Forgets the RedisQuotaStore instances. */
export declare function resetRedisQuotaStore(): void
/** The process's store: the host's DB setting, then the environment, then SQLite. Never rejects. */
export declare function getQuotaStore(): Promise<QuotaStore>
/** Throws before the first `getQuotaStore()` resolved. */
export declare function getQuotaStoreSync(): QuotaStore
export declare function resetQuotaStoreSingleton(): void
/** Runs the retention sweep now; resolves to the number of rows deleted. */
export declare function gcConsumption(): Promise<number>
export declare function deletePool(id: string): Promise<boolean>

export interface QuotaRequest {
  apiKeyId: string; connectionId: string; provider: string; model?: string; estimatedCost?: number
  /** Reserve mode only (beyond the contract): the tokens to reserve (default 0). */
  estimatedTokens?: number
}
export type EnforceResult =
  /** `reservation`: only with `QUOTA_ADMISSION=reserve` (beyond the contract). */
  | { kind: 'allow'; deprioritize?: boolean; reservation?: string }
  | { kind: 'block'; reason: string; httpStatus: 429; retryAfterSeconds?: number }
/** Decides a request before the upstream call. Never rejects: internal errors allow and log. */
export declare function enforceQuotaShare(input: QuotaRequest): Promise<EnforceResult>
/** Records a successful request's cost. Never rejects. */
export declare function recordConsumption(input: { apiKeyId: string; connectionId: string; provider: string; model?: string; cost: { tokens?: number; usd?: number; requests?: number }; /** Reserve mode: settle this reservation (`actual − reserved`, in its buckets). */ reservation?: string }): Promise<void>
/**
 * Reserve mode (beyond the contract): the reserved request did not happen; subtracts the
 * reservation from its buckets (never below 0). Rejects `ERR_QUOTA_INVALID_ARG` for a
 * malformed reservation (nothing written); store failures are logged, not rejected.
 */
export declare function releaseReservation(reservation: string): Promise<void>
/**
 * Beyond the contract: commits the records `recordConsumption` buffered (SQLite) now, so
 * other connections see them; the engine's own reads always include them. They are
 * committed within `QUOTA_RECORD_FLUSH_MS` (10 ms by default) anyway (and at exit, and by
 * `closeQuotaDb()`). Returns `null`, or the error message — the records then stay
 * buffered for the next flush. Never throws.
 */
export declare function flushQuotaWrites(): string | null
/**
 * Commits the buffered records (waiting up to the busy timeout for a lock), then closes the
 * engine's connection; the next call reopens, resolving the path again.
 */
export declare function closeQuotaDb(): void
export declare function scheduleRecordConsumption(input: Parameters<typeof recordConsumption>[0], log?: { warn(obj: unknown, msg?: string): void }): void
export declare function buildConsumptionCost(usage: { prompt_tokens?: unknown; completion_tokens?: unknown } | null | undefined, estimatedCost: number): { tokens: number; usd: number; requests: number }
export declare function recordStreamingConsumption(params: { apiKeyId?: string; connectionId?: string; provider?: string; model: string; streamUsage: unknown; streamStatus: number; serviceTier?: string; /** Reserve mode: settled, or released on a failed stream. */ reservation?: string }, deps: { calculateCost(provider: string, model: string, usage: unknown, opts: { serviceTier?: string }): Promise<number>; schedule?: typeof scheduleRecordConsumption; log?: { warn(obj: unknown, msg?: string): void } }): Promise<void>
/** `QUOTA_SOFT_DEPRIORITIZE_FACTOR` (default 0.7, clamped 0..1). */
export declare function softPenaltyFactor(): number

export type SaturationFetcher = (connectionId: string, dim: { unit: QuotaUnit; window: QuotaWindow }, connection?: unknown) => Promise<number>
/** 0..1, cached 30 s per (provider, connectionId, unit, window); any error → 0. */
export declare function getSaturation(connectionId: string, provider: string, dim: { unit: QuotaUnit; window: QuotaWindow }): Promise<number>
export declare function registerSaturationFetcher(provider: string, fetcher: SaturationFetcher | null): void
export declare function storeRateLimitHeaders(connectionId: string, provider: string, headers: Record<string, string | string[] | undefined> | Headers): void
export declare function getTokenHeaderSaturation(provider: string, connectionId: string): { saturation: number; resetAt: number | null } | null

export interface Logger { warn(obj: object, msg?: string): void; info?(obj: object, msg?: string): void; debug?(obj: object, msg?: string): void }
export interface HostOptions {
  dbPath?: string | (() => string)
  registerDbStateResetter?: (fn: () => void) => void
  logger?: Logger
  saturationFetchers?: Record<string, SaturationFetcher>
  onQuotaEvent?: (event: string, payload: Record<string, unknown>) => void
}
/** Called once at the host's start-up; calling it again replaces the options. */
export declare function installHost(options: HostOptions): void
export declare function setLogger(logger: Logger | null): void
export declare function setQuotaEventListener(listener: ((event: string, payload: Record<string, unknown>) => void) | null): void

// <surface: lib declarations>
export { dimensionKeyToString } from './lib/dimensionKey'
export { getKnownPlan, knownProviders } from './lib/plans'
export { selectQuotaShareTarget } from './lib/quotaShareStrategy'
export type { QuotaShareTarget, QuotaShareSelectOptions, QuotaShareSelection } from './lib/quotaShareStrategy'
export { quotaShareConcurrencyKey, acquireQuotaShareConcurrencySlot } from './lib/quotaShareConcurrency'
export type { QuotaShareQueueOptions, QuotaShareLogger } from './lib/quotaShareConcurrency'
// </surface: lib declarations>
