import entry from './saturationSignals.js'

export const {
  getSaturation,
  storeRateLimitHeaders,
  getTokenHeaderSaturation,
  _clearRateLimitHeaders,
  _clearSaturationCache,
  __setAnthropicSaturationDepsForTests,
  __setGenericUsageFetcherForTests,
} = entry
