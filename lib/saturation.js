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

/** `{ saturation, resetAt }` (epoch ms, or `null`) from token headers at most 5 min old, or `null`. */
function getTokenHeaderSaturation(provider, connectionId) {
  const value = native.tokenHeaderSaturationOf(String(provider), String(connectionId))
  if (!value) return null
  return { saturation: value.saturation, resetAt: value.resetAtMs ?? null }
}

// Fetches in flight in this isolate, shared by every need of the same entry (single
// flight): `provider\0connectionId\0unit\0window` → the promise of the stored value, and
// a seam's usage fetch `name\0provider\0connectionId` → the promise of the usage.
const flights = new Map()
const usageFlights = new Map()
const TIMED_OUT = Symbol('timed out')

/**
 * One shared promise per key while it runs, registered before `start` runs: a lookup of
 * the same key made from inside `start` (a fetcher asking for its own entry) joins it.
 */
function shared(map, key, start) {
  let flight = map.get(key)
  if (!flight) {
    let settle
    flight = new Promise((resolve) => {
      settle = resolve
    }).finally(() => map.delete(key))
    map.set(key, flight)
    try {
      settle(start())
    } catch (err) {
      settle(Promise.reject(err))
    }
  }
  return flight
}

/**
 * Calls the fetcher the engine named (`host:<provider>` or `seam:<provider>`): a number, or
 * `null` for the engine's fallback (anthropic's requests headers, any other provider's
 * token headers). The seams read usage as the host's own module does, one usage fetch
 * answering every window of a connection: any provider's `percentUsed`, anthropic's plan
 * window; a failed fetch takes the fallback.
 */
async function callFetcher(name, connectionId, provider, dim) {
  const [tier, key] = [name.slice(0, 4), name.slice(5)]
  if (tier === 'host') {
    const fetcher = host.state.fetchers.get(key)
    return fetcher ? Number(await fetcher(connectionId, dim)) : null
  }
  const anthropic = key !== '*'
  try {
    const usage = await shared(usageFlights, `${name}\0${provider}\0${connectionId}`, () =>
      anthropic ? anthropicUsage(connectionId) : seams.generic(connectionId, provider),
    )
    return native.usageSaturation(usage, dim.window, anthropic)
  } catch (err) {
    if (anthropic) {
      host.log('warn', 'quota:saturation', 'anthropic usage saturation failed; using its rate-limit headers', {
        provider,
        connectionId,
        error: host.errorText(err),
      })
    }
    return null
  }
}

/**
 * The anthropic seam's usage of a connection: fetched only for an OAuth connection (an
 * API-key one has no plan window), and fed to its account buckets, which never gate the
 * signal; `null` for any other.
 */
async function anthropicUsage(connectionId) {
  const { loadConnection, fetchUsage } = seams.anthropic
  const connection = await loadConnection(connectionId)
  const oauth =
    connection &&
    typeof connection.accessToken === 'string' &&
    connection.accessToken.length > 0 &&
    (connection.authType === undefined || connection.authType === 'oauth')
  if (!oauth) return null
  const usage = await fetchUsage(connection)
  try {
    native.updateAccountBuckets(connectionId, usage, Date.now())
  } catch {
    // Additive: a malformed usage leaves the buckets as they were.
  }
  return usage
}

/**
 * `promise`, or `TIMED_OUT` after `ms`. The timer is not unref'd: a request waiting on a
 * fetcher that never settles must still be answered, and it keeps the process at most
 * `ms` longer.
 */
function bounded(promise, ms) {
  let timer
  const timeout = new Promise((resolve) => {
    timer = setTimeout(resolve, ms, TIMED_OUT)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

/** Per entry with a fetch out, the number of the one started last (numbers only grow): a
 *  late answer of an older one is stale. */
const latestFetch = new Map()
let fetchesStarted = 0

/**
 * Runs the fetcher and stores its answer, bounded by QUOTA_SATURATION_FETCH_TIMEOUT_MS: a
 * fetch that takes longer stores the fallback (token headers, else 0) for the requests
 * waiting on it, warns once per connection until it answers, and stores its answer when it
 * comes (unless a newer fetch of the entry started meanwhile); an error stores 0.
 */
async function fetchAndStore(key, name, connectionId, provider, p, c, unit, window) {
  const timeoutMs = native.saturationFetchTimeoutMs()
  const number = ++fetchesStarted
  latestFetch.set(key, number)
  const settled = () => latestFetch.get(key) === number && latestFetch.delete(key)
  let value
  try {
    const fetch = callFetcher(name, connectionId, provider, { unit, window })
    value = await bounded(fetch, timeoutMs)
    if (value === TIMED_OUT) {
      native.saturationFetchTimedOut(p, c, timeoutMs)
      value = null
      fetch.then(
        (late) => {
          if (typeof late === 'number' && latestFetch.get(key) === number) {
            native.putSaturation(p, c, unit, window, late)
            host.drainLogs()
          }
          settled()
        },
        settled,
      )
    } else {
      settled()
    }
  } catch (err) {
    settled()
    host.log('warn', 'quota:saturation', 'saturation fetch failed; treating as 0', {
      provider,
      connectionId,
      error: host.errorText(err),
    })
    value = 0
  }
  const stored = native.putSaturation(p, c, unit, window, typeof value === 'number' ? value : null)
  host.drainLogs()
  return stored
}

/** The single flight of one entry's fetch. */
function fetchOnce(name, connectionId, provider, unit, window) {
  const [p, c] = [String(provider), String(connectionId)]
  const key = `${p}\0${c}\0${unit}\0${window}`
  return shared(flights, key, () => fetchAndStore(key, name, connectionId, provider, p, c, unit, window))
}

/**
 * Runs in the background the refreshes the engine asked for (`[provider, connectionId,
 * unit, window, fetcher name]`: entries it served past their 30 s). Never rejects.
 */
function refreshInBackground(refreshes) {
  for (const [provider, connectionId, unit, window, name] of refreshes) {
    fetchOnce(name, connectionId, provider, unit, window).catch(() => {})
  }
}

/**
 * `getSaturation(connectionId, provider, { unit, window })` → 0..1, cached 30 s per
 * `(provider, connectionId, unit, window)`; any error → 0. Concurrent calls for one entry
 * share one fetch; an entry past its 30 s is answered at once while one refresh runs.
 */
async function getSaturation(connectionId, provider, dim) {
  try {
    return await saturationOf(connectionId, provider, dim)
  } catch (err) {
    host.log('warn', 'quota:saturation', 'saturation lookup failed; treating as 0', { error: host.errorText(err) })
    return 0
  }
}

async function saturationOf(connectionId, provider, dim) {
  const unit = String(dim && dim.unit)
  const window = String(dim && dim.window)
  const [p, c] = [String(provider), String(connectionId)]
  const found = native.saturationLookup(p, c, unit, window)
  if (typeof found === 'number') {
    const refreshes = native.takeSaturationRefreshes()
    if (refreshes) refreshInBackground(refreshes)
    return found
  }
  return fetchOnce(found, connectionId, provider, unit, window)
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
  refreshInBackground,
  storeRateLimitHeaders,
  getTokenHeaderSaturation,
  _clearRateLimitHeaders: native._clearRateLimitHeaders,
  _clearSaturationCache: native._clearSaturationCache,
  __setAnthropicSaturationDepsForTests,
  __setGenericUsageFetcherForTests,
}
