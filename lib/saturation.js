'use strict'
// Saturation signals (CONTRACT §8). The cache, the header parsing and the fallback are in
// Rust; this file only calls the host's async fetchers, which are JavaScript.
const native = require('../binding.js')
const host = require('./host.js')
const metrics = require('./metrics.js')

const testSeams = { anthropic: null, generic: null }

function headerPairs(headers) {
  if (!headers) return []
  if (typeof headers.entries === 'function' && typeof headers.get === 'function') {
    return [...headers.entries()].map(([k, v]) => [String(k), String(v)])
  }
  return Object.entries(headers)
    .filter(([, v]) => v !== undefined && v !== null)
    .map(([k, v]) => [String(k), Array.isArray(v) ? String(v[0]) : String(v)])
}

/** Records an upstream response's rate-limit headers (anthropic and openai families). */
function storeRateLimitHeaders(connectionId, provider, headers) {
  if (!connectionId || !provider) return
  native.storeRateLimitHeaderPairs(String(connectionId), String(provider), headerPairs(headers))
}

/** `{ saturation, resetAt }` from token headers at most 5 min old, or `null`. */
function getTokenHeaderSaturation(provider, connectionId) {
  const value = native.tokenHeaderSaturationOf(String(provider), String(connectionId))
  if (!value) return null
  return {
    saturation: value.saturation,
    resetAt: value.resetAtMs === undefined ? null : new Date(value.resetAtMs).toISOString(),
  }
}

/** The used share (0..1) of a usage result's quota for `window`, or `null`. */
function usageSaturation(usage, window) {
  const quotas = usage && usage.quotas
  if (!quotas || typeof quotas !== 'object') return null
  const name = window === '5h' ? 'session (5h)' : window === 'weekly' ? 'weekly (7d)' : null
  const entry = name ? quotas[name] : null
  if (!entry || typeof entry !== 'object') return null
  if (Number.isFinite(entry.remainingPercentage)) return (100 - entry.remainingPercentage) / 100
  if (Number.isFinite(entry.used) && Number.isFinite(entry.total) && entry.total > 0) return entry.used / entry.total
  return null
}

function fetcherFor(provider) {
  return host.state.fetchers.get(provider) || host.state.fetchers.get('*') || null
}

async function fetchSaturation(connectionId, provider, dim) {
  const fetcher = fetcherFor(provider)
  if (fetcher) return Number(await fetcher(connectionId, dim))
  if ((provider === 'anthropic' || provider === 'claude') && testSeams.anthropic) {
    const connection = await testSeams.anthropic.loadConnection(connectionId)
    return usageSaturation(await testSeams.anthropic.fetchUsage(connection), dim.window)
  }
  if (testSeams.generic) return usageSaturation(await testSeams.generic(connectionId, provider), dim.window)
  return null
}

/**
 * `getSaturation(connectionId, provider, { unit, window })` → 0..1, cached 30 s per
 * `(provider, connectionId, unit, window)`; any error → 0.
 */
async function getSaturation(connectionId, provider, dim) {
  const unit = dim && dim.unit
  const window = dim && dim.window
  const cached = native.cachedSaturation(String(provider), String(connectionId), String(unit), String(window))
  if (cached !== null && cached !== undefined) {
    metrics.saturationLookup(true)
    return cached
  }
  metrics.saturationLookup(false)
  let value = null
  try {
    value = await fetchSaturation(connectionId, provider, { unit, window })
  } catch (err) {
    host.log('warn', 'quota:saturation', 'saturation fetch failed; treating as 0', {
      provider,
      connectionId,
      error: String(err && err.message),
    })
    value = 0
  }
  if (value === null || value === undefined || Number.isNaN(value)) {
    const fallback = getTokenHeaderSaturation(provider, connectionId)
    value = fallback ? fallback.saturation : 0
  }
  return native.putSaturation(String(provider), String(connectionId), String(unit), String(window), value)
}

function syncSeams() {
  const providers = []
  if (testSeams.anthropic) providers.push('anthropic', 'claude')
  if (testSeams.generic) providers.push('*')
  host.state.seamProviders = providers
  host.syncFetcherProviders()
}

/** Test seam: replaces the host-side fetch used for anthropic/claude. */
function __setAnthropicSaturationDepsForTests(deps) {
  testSeams.anthropic = deps || null
  syncSeams()
}

/** Test seam: replaces the host-side usage fetch used for every other provider. */
function __setGenericUsageFetcherForTests(fn) {
  testSeams.generic = typeof fn === 'function' ? fn : null
  syncSeams()
}

module.exports = {
  getSaturation,
  storeRateLimitHeaders,
  getTokenHeaderSaturation,
  _clearRateLimitHeaders: native._clearRateLimitHeaders,
  _clearSaturationCache: native._clearSaturationCache,
  __setAnthropicSaturationDepsForTests,
  __setGenericUsageFetcherForTests,
}
