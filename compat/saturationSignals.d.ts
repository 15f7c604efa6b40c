export { getSaturation, storeRateLimitHeaders, getTokenHeaderSaturation } from '../index'
export { _clearRateLimitHeaders, _clearSaturationCache } from '../binding'
export declare function __setAnthropicSaturationDepsForTests(deps: { loadConnection(connectionId: string): Promise<unknown>; fetchUsage(connection: unknown): Promise<unknown> } | null): void
export declare function __setGenericUsageFetcherForTests(fetch: ((connectionId: string, provider: string) => Promise<unknown>) | null): void
