'use strict'
// Saturation signals (docs/contract.md §8). The cache, the fetcher registry, the header
// parsing and the fallback are the engine's; this file only calls the fetcher the engine
// names, since fetchers are the host's async JavaScript.
const native = require('./native.js')
const host = require('./host.js')

// The test seams (`__set…ForTests`): host-side usage fetches, read through the engine's
// `usageSaturation`. The engine consults them only for providers no host fetcher serves.
const seams = { anthropic: null, generic: null }

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

/** Calls the fetcher the engine named (`host:<provider>` or `seam:<provider>`). */
async function callFetcher(name, connectionId, provider, dim) {
  const [tier, key] = [name.slice(0, 4), name.slice(5)]
  if (tier === 'host') {
    const fetcher = host.state.fetchers.get(key)
    return fetcher ? Number(await fetcher(connectionId, dim)) : null
  }
  const usage =
    key === '*'
      ? await seams.generic(connectionId, provider)
      : await seams.anthropic.fetchUsage(await seams.anthropic.loadConnection(connectionId))
  return native.usageSaturation(usage, dim.window)
}

/**
 * `getSaturation(connectionId, provider, { unit, window })` → 0..1, cached 30 s per
 * `(provider, connectionId, unit, window)`; any error → 0.
 */
async function getSaturation(connectionId, provider, dim) {
  const unit = String(dim && dim.unit)
  const window = String(dim && dim.window)
  const [p, c] = [String(provider), String(connectionId)]
  const found = native.saturationLookup(p, c, unit, window)
  if (typeof found === 'number') return found
  let value
  try {
    value = await callFetcher(found, connectionId, provider, { unit, window })
  } catch (err) {
    host.log('warn', 'quota:saturation', 'saturation fetch failed; treating as 0', {
      provider,
      connectionId,
      error: String(err && err.message),
    })
    value = 0
  }
  return native.putSaturation(p, c, unit, window, typeof value === 'number' ? value : null)
}

function syncSeams() {
  const providers = []
  if (seams.anthropic) providers.push('anthropic', 'claude')
  if (seams.generic) providers.push('*')
  native.setSaturationFetchers('seam', providers)
}

/** Test seam: replaces the host-side fetch used for anthropic/claude. */
function __setAnthropicSaturationDepsForTests(deps) {
  seams.anthropic = deps || null
  syncSeams()
}

/** Test seam: replaces the host-side usage fetch used for every other provider. */
function __setGenericUsageFetcherForTests(fn) {
  seams.generic = typeof fn === 'function' ? fn : null
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
