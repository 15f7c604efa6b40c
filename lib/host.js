'use strict'
// Host services (docs/contract.md §0, §12): installHost, the logger, the quota event
// listener and the host's saturation fetchers. Plumbing only: the configuration, the
// fetcher registry's precedence and every decision live in the engine (src/engine/).
const native = require('./native.js')

const state = {
  logger: null,
  onQuotaEvent: null,
  // The host's saturation fetchers by provider ("*": every provider); the engine keeps
  // the registry of which exist and says which one to call.
  fetchers: new Map(),
}

/** Masks the password of any `scheme://user:password@host` in a string (the engine's rule). */
function maskSecrets(text) {
  return typeof text === 'string' && text.includes('://') ? native.maskSecrets(text) : text
}

/** Writes one record to stderr; a stderr that throws loses the record, nothing else. */
function writeStderr(level, record, msg) {
  try {
    const line = { level, time: new Date().toISOString(), ...record, msg }
    process.stderr.write(`${maskSecrets(JSON.stringify(line))}\n`)
  } catch {}
}

/** A thrown value as text, for a log record; never throws, whatever was thrown. */
function errorText(err) {
  try {
    return String((err && err.message) || err)
  } catch {
    // No usable toString (`Object.create(null)`, a Symbol message, a throwing getter).
    try {
      return Object.prototype.toString.call(err)
    } catch {
      return 'an error that cannot be shown'
    }
  }
}

/**
 * Logs one record with its `component`, through the host's logger or to stderr. Never
 * throws: it runs in catch blocks and fail-open paths, whose outcome must stand.
 */
function log(level, component, msg, fields = {}) {
  const record = { component, ...fields }
  for (const key of Object.keys(record)) record[key] = maskSecrets(record[key])
  msg = maskSecrets(msg)
  const logger = state.logger
  if (logger) {
    // Reading the method is inside the try too: a getter or a Proxy may throw, and a
    // logger must never break the caller (a fail-open path, the flush timer).
    try {
      const method = logger[level]
      if (typeof method === 'function') {
        method.call(logger, record, msg)
        return
      }
    } catch {
      // Fall through to stderr.
    }
  }
  if (level === 'warn' || level === 'error') writeStderr(level, record, msg)
}

/** Records on their way to the logger, oldest first. */
const outbox = []
let delivering = false
/**
 * At most this many records wait here, past it new ones are dropped, and one hand-over
 * delivers at most this many: as the engine's own queue (src/engine/telemetry.rs), a
 * flood would only repeat itself, and a logger that makes the engine log each time it
 * handles a record gets the rest at the next hand-over instead of keeping this one going.
 */
const OUTBOX_CAPACITY = 1000

/**
 * Forwards log records produced in Rust, with any still waiting here, in the order the
 * engine made them: a logger that calls the engine while it handles one record gets what
 * that call logged after the records already on their way, not before them. `nested`: the
 * records go out even while a delivery is under way (at exit, which that delivery will
 * never resume). Never throws.
 */
function forwardLogs(records, nested = false) {
  if (records) for (const r of records) if (outbox.length < OUTBOX_CAPACITY) outbox.push(r)
  if ((delivering && !nested) || outbox.length === 0) return
  const outer = !delivering
  delivering = true
  for (let n = 0; n < OUTBOX_CAPACITY && outbox.length > 0; n++) {
    const r = outbox.shift()
    log(r.level, r.component, r.msg, r.fields)
  }
  if (outer) delivering = false
}

/**
 * Forwards whatever the engine logged since the last crossing (and what a previous
 * hand-over left waiting). Never throws: it runs after calls whose own answer or error
 * must stand. `atExit`: see `forwardLogs`.
 */
function drainLogs(atExit = false) {
  try {
    forwardLogs(native.takeLogs(), atExit)
  } catch {}
}

/** `setLogger(logger)`: a pino-like object (`warn(obj, msg)`, `info`, `debug`); none: stderr. */
function setLogger(logger) {
  state.logger = checked(logger, 'logger', 'object') ?? null
}

/** `setQuotaEventListener(fn)`: receives `(event, payload)`, best effort; none: no events. */
function setQuotaEventListener(listener) {
  state.onQuotaEvent = checked(listener, 'listener', 'function') ?? null
}

function emitQuotaEvent(event, payload) {
  const listener = state.onQuotaEvent
  if (!listener) return
  const threw = (err) => log('warn', 'quota:enforce', 'quota event listener threw', { error: errorText(err) })
  try {
    const result = listener(event, payload)
    // An async listener's rejection is its throw: logged, not an unhandled rejection.
    if (result !== null && typeof result === 'object' && typeof result.then === 'function') result.then(undefined, threw)
  } catch (err) {
    threw(err)
  }
}

function invalidArg(message) {
  const err = new TypeError(message)
  err.code = 'ERR_QUOTA_INVALID_ARG'
  return err
}

/**
 * `value` when it is a function, or (`want` 'object') an object or a function; `undefined`
 * for `undefined` or `null` (none). Anything else is the `field`'s TypeError: a fetcher or
 * a logger given by mistake must not silently leave the host without one.
 */
function checked(value, field, want) {
  if (value === undefined || value === null) return undefined
  if (typeof value === 'function' || (want === 'object' && typeof value === 'object')) return value
  throw invalidArg(`${field}: expected ${want === 'object' ? 'an object' : 'a function'}, got ${typeof value}`)
}

/** `registerSaturationFetcher(provider, fn)`; `"*"` is the default for every provider; `null` removes it. */
function registerSaturationFetcher(provider, fetcher) {
  if (typeof provider !== 'string' || provider === '') throw invalidArg('provider: expected a non-empty string')
  if (checked(fetcher, 'fetcher', 'function')) state.fetchers.set(provider, fetcher)
  else state.fetchers.delete(provider)
  native.setSaturationFetchers('host', [...state.fetchers.keys()])
}

/**
 * `installHost(options)`: called once at the host's start-up; calling it again replaces
 * the options. `{ dbPath?, registerDbStateResetter?, logger?, saturationFetchers?,
 * onQuotaEvent? }`. The database path is the process's: worker threads use it too.
 */
function installHost(options = {}) {
  if (options === null || typeof options !== 'object') throw invalidArg('options: expected an object')
  // Every option read (once) and checked before any is applied: one whose getter throws, or
  // of the wrong type, changes nothing.
  const { dbPath, logger, onQuotaEvent, registerDbStateResetter, saturationFetchers } = options
  checked(logger, 'options.logger', 'object')
  checked(onQuotaEvent, 'options.onQuotaEvent', 'function')
  checked(registerDbStateResetter, 'options.registerDbStateResetter', 'function')
  const fetchers = Object.entries(checked(saturationFetchers, 'options.saturationFetchers', 'object') ?? {})
    .filter(([provider, fetcher]) => checked(fetcher, `options.saturationFetchers.${provider}`, 'function'))
  // The logger first: installing a dbPath function asks it, and what that says (it called
  // the engine, it threw) goes to this logger. A refused dbPath leaves both as they were.
  const previous = state.logger
  setLogger(logger)
  try {
    native.configureDbPath(dbPath)
  } catch (err) {
    setLogger(previous)
    throw err
  }
  setQuotaEventListener(onQuotaEvent)
  state.fetchers = new Map(fetchers)
  native.setSaturationFetchers('host', [...state.fetchers.keys()])
  if (typeof registerDbStateResetter === 'function') {
    // Required here, not at the top: writeBuffer.js requires this module.
    registerDbStateResetter(require('./writeBuffer.js').closeQuotaDb)
  }
}

module.exports = {
  state,
  errorText,
  log,
  forwardLogs,
  drainLogs,
  maskSecrets,
  setLogger,
  setQuotaEventListener,
  emitQuotaEvent,
  registerSaturationFetcher,
  installHost,
}
