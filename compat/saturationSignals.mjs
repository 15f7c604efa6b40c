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

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
