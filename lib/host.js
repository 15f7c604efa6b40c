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
    // Required here, not at the top: writeBuffer.js requires this module.
    options.registerDbStateResetter(require('./writeBuffer.js').closeQuotaDb)
  }
}

// The numeric settings of CONTRACT §11: name, default and valid range. `clamp`: an
// out-of-range number is clamped rather than replaced by the default.
const NUMERIC_SETTINGS = {
  saturationThreshold: { name: 'QUOTA_SATURATION_THRESHOLD', fallback: 0.5, min: 0, max: 1 },
  softDeprioritizeFactor: { name: 'QUOTA_SOFT_DEPRIORITIZE_FACTOR', fallback: 0.7, min: 0, max: 1, clamp: true },
  retentionDays: { name: 'QUOTA_CONSUMPTION_RETENTION_DAYS', fallback: 14, min: 0, max: 36500 },
  // Beyond the contract: how old buffered records may get before a recording call commits
  // them itself (they are committed on the next turn of the event loop anyway); 0 commits
  // every record in its own call.
  recordFlushMs: { name: 'QUOTA_RECORD_FLUSH_MS', fallback: 10, min: 0, max: 60000 },
}

/**
 * What a raw value of a numeric setting means: `{ value, valid, clamped }` — the value in
 * effect, whether the raw value was a number within `[min, max]` (unset counts as
 * valid), and whether an out-of-range number was clamped rather than replaced.
 */
function evaluateNumber(spec, raw) {
  if (raw === undefined || raw === '') return { value: spec.fallback, valid: true, clamped: false }
  const value = Number(raw)
  if (Number.isFinite(value) && value >= spec.min && value <= spec.max) return { value, valid: true, clamped: false }
  if (spec.clamp && Number.isFinite(value)) {
    return { value: Math.min(Math.max(value, spec.min), spec.max), valid: false, clamped: true }
  }
  return { value: spec.fallback, valid: false, clamped: false }
}

/**
 * A numeric setting from the environment: the default, with one warning per bad value,
 * when the value is not a number within `[min, max]`.
 */
function numberSetting(spec) {
  const raw = process.env[spec.name]
  const { value, valid, clamped } = evaluateNumber(spec, raw)
  if (valid || clamped) return value
  const key = `${spec.name}=${raw}`
  if (!state.warnedConfig.has(key)) {
    state.warnedConfig.add(key)
    log('warn', 'quota:config', `${spec.name}=${JSON.stringify(raw)} is not a number in ${spec.min}..${spec.max}; using ${spec.fallback}`)
  }
  return value
}

const config = {
  saturationThreshold: () => numberSetting(NUMERIC_SETTINGS.saturationThreshold),
  // §7: the soft factor is clamped into 0..1; only a non-number falls back (and warns).
  softDeprioritizeFactor: () => numberSetting(NUMERIC_SETTINGS.softDeprioritizeFactor),
  retentionDays: () => numberSetting(NUMERIC_SETTINGS.retentionDays),
  recordFlushMs: () => numberSetting(NUMERIC_SETTINGS.recordFlushMs),
  admission: () => admissionMode(),
}

/**
 * `QUOTA_ADMISSION` (beyond the contract): `reserve` — enforce reserves the estimated cost
 * atomically, record settles it — or `default` (unset, empty or `default`: the contract's
 * peek-then-record). Anything else is `default`, with one warning.
 */
function admissionMode() {
  const raw = process.env.QUOTA_ADMISSION
  if (raw === undefined || raw === '' || raw === 'default') return 'default'
  if (raw === 'reserve') return 'reserve'
  const key = `QUOTA_ADMISSION=${raw}`
  if (!state.warnedConfig.has(key)) {
    state.warnedConfig.add(key)
    log('warn', 'quota:config', `QUOTA_ADMISSION=${JSON.stringify(raw)} is not "default" or "reserve"; using default`)
  }
  return 'default'
}

/**
 * The numeric settings as `env` has them, without logging: `[{ name, raw, value, default,
 * min, max, valid, clamped }]` (for `quota-engine doctor`).
 */
function describeNumericSettings(env = process.env) {
  return Object.values(NUMERIC_SETTINGS).map((spec) => {
    const raw = env[spec.name]
    const { value, valid, clamped } = evaluateNumber(spec, raw)
    return { name: spec.name, raw: raw ?? null, value, default: spec.fallback, min: spec.min, max: spec.max, valid, clamped }
  })
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
  describeNumericSettings,
}
