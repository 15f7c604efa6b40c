'use strict'
// Host services (CONTRACT §0, §12): installHost, the logger, the quota event listener and
// the configuration read from the environment (§11). Thin: state and plumbing only.
const native = require('../binding.js')

const state = {
  logger: null,
  onQuotaEvent: null,
  fetchers: new Map(),
  // Providers served by the saturation test seams (see saturation.js).
  seamProviders: [],
  warnedConfig: new Set(),
}

const SECRET_IN_URL = /(\w+:\/\/[^:/@\s]*:)([^@\s]+)(@)/g

/** Masks the password of any `scheme://user:password@host` in a string. */
function maskSecrets(text) {
  return typeof text === 'string' ? text.replace(SECRET_IN_URL, '$1***$3') : text
}

function writeStderr(level, record, msg) {
  const line = { level, time: new Date().toISOString(), ...record, msg }
  process.stderr.write(`${maskSecrets(JSON.stringify(line))}\n`)
}

/** Logs one record with its `component`, through the host's logger or to stderr. */
function log(level, component, msg, fields = {}) {
  const record = { component, ...fields }
  for (const key of Object.keys(record)) record[key] = maskSecrets(record[key])
  msg = maskSecrets(msg)
  const logger = state.logger
  if (logger && typeof logger[level] === 'function') {
    try {
      logger[level](record, msg)
      return
    } catch {
      // A throwing logger must not break the caller; fall through to stderr.
    }
  }
  if (level === 'warn' || level === 'error') writeStderr(level, record, msg)
}

/** Forwards log records produced in Rust. */
function forwardLogs(records) {
  if (!records) return
  for (const r of records) log(r.level, r.component, r.msg, r.detail ? { detail: r.detail } : {})
}

/** `setLogger(logger)`: a pino-like object (`warn(obj, msg)`, `info`, `debug`). */
function setLogger(logger) {
  state.logger = logger || null
}

/** `setQuotaEventListener(fn)`: receives `(event, payload)`, best effort. */
function setQuotaEventListener(listener) {
  state.onQuotaEvent = typeof listener === 'function' ? listener : null
}

function emitQuotaEvent(event, payload) {
  const listener = state.onQuotaEvent
  if (!listener) return
  try {
    listener(event, payload)
  } catch (err) {
    log('warn', 'quota:enforce', 'quota event listener threw', { error: String(err && err.message) })
  }
}

function syncFetcherProviders() {
  native.setSaturationFetcherProviders([...state.fetchers.keys(), ...state.seamProviders])
}

/** `registerSaturationFetcher(provider, fn)`; `"*"` is the default for every provider. */
function registerSaturationFetcher(provider, fetcher) {
  if (typeof provider !== 'string' || provider === '') {
    const err = new TypeError('provider: expected a non-empty string')
    err.code = 'ERR_QUOTA_INVALID_ARG'
    throw err
  }
  if (typeof fetcher === 'function') state.fetchers.set(provider, fetcher)
  else state.fetchers.delete(provider)
  syncFetcherProviders()
}

/**
 * `installHost(options)`: called once at the host's start-up; calling it again replaces
 * the options. `{ dbPath?, registerDbStateResetter?, logger?, saturationFetchers?,
 * onQuotaEvent? }`.
 */
function installHost(options = {}) {
  if (options === null || typeof options !== 'object') {
    const err = new TypeError('options: expected an object')
    err.code = 'ERR_QUOTA_INVALID_ARG'
    throw err
  }
  native.configureDbPath(options.dbPath)
  setLogger(options.logger)
  setQuotaEventListener(options.onQuotaEvent)
  state.fetchers.clear()
  for (const [provider, fetcher] of Object.entries(options.saturationFetchers || {})) {
    if (typeof fetcher === 'function') state.fetchers.set(provider, fetcher)
  }
  syncFetcherProviders()
  if (typeof options.registerDbStateResetter === 'function') {
    options.registerDbStateResetter(native.closeQuotaDb)
  }
}

/**
 * A numeric setting from the environment: the default, with one warning per bad value,
 * when the value is not a number within `[min, max]`.
 */
function numberSetting(name, fallback, min, max, { clamp = false } = {}) {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const value = Number(raw)
  if (Number.isFinite(value) && value >= min && value <= max) return value
  if (clamp && Number.isFinite(value)) return Math.min(Math.max(value, min), max)
  const key = `${name}=${raw}`
  if (!state.warnedConfig.has(key)) {
    state.warnedConfig.add(key)
    log('warn', 'quota:config', `${name}=${JSON.stringify(raw)} is not a number in ${min}..${max}; using ${fallback}`)
  }
  return fallback
}

const config = {
  saturationThreshold: () => numberSetting('QUOTA_SATURATION_THRESHOLD', 0.5, 0, 1),
  // §7: the soft factor is clamped into 0..1; only a non-number falls back (and warns).
  softDeprioritizeFactor: () => numberSetting('QUOTA_SOFT_DEPRIORITIZE_FACTOR', 0.7, 0, 1, { clamp: true }),
  retentionDays: () => numberSetting('QUOTA_CONSUMPTION_RETENTION_DAYS', 14, 0, 36500),
}

module.exports = {
  state,
  syncFetcherProviders,
  log,
  forwardLogs,
  maskSecrets,
  setLogger,
  setQuotaEventListener,
  emitQuotaEvent,
  registerSaturationFetcher,
  installHost,
  config,
}
