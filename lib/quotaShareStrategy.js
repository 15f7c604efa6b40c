'use strict'
// selectQuotaShareTarget (docs/contract.md §10): the JavaScript shell of the native selection.
//
// The host's API needs two JavaScript idioms — the result holds the host's own target
// objects, and `decrementInflight` is a closure — so this thin wrapper exists. It holds no
// algorithm: it reads the fields the selection needs into one Float64Array, makes ONE
// native call (`__quotaShareSelect`, src/binding/quota_share.rs), and maps the order the
// call writes back (indices) onto the host's objects.
//
// The crossing is the whole cost at 2–8 targets, so no string crosses per target:
// - Connection ids, execution keys and combo names are interned once to numeric symbols
//   by the native side (`__quotaShareSymbol`) and cached here in a Map. The request's model
//   string is the only string that crosses per call; it is never interned (it comes from
//   the request, an unbounded set).
// - A targets array selected from twice gets a cache entry (WeakMap, keyed by the array):
//   its Float64Array of symbols and weights, plus the objects and field values it was read
//   from. Each call still reads every target's fields and compares them with the entry's
//   (identity compares, no hashing), re-reading any that changed, so mutating the array or
//   its objects in place is always seen. Caps are read fresh on every call.
// - Each selection owns the buffer it reads into, from its first read to its last: a cache
//   entry is marked busy while a selection uses it, and an array seen once is read into a
//   spare buffer that the selection takes and leaves for the next one when done. A
//   selection made from inside another (a getter or a Proxy on a target) finds both taken
//   and reads into a new buffer, so no call ever sees another's targets or order. The
//   name caches are shared, but a cached symbol stays valid until the native side says
//   otherwise.
// - The native table is bounded (QUOTA_SCHEDULER_MAX_IDS, docs/scheduler.md "A bound on
//   names"): it evicts the least recently used names, and a symbol is never reused for
//   another name. A selection given an evicted symbol selects nothing and returns false;
//   this shell then empties its caches, re-interns and retries. The caches here hold at
//   most the same bound of names (emptied when full).

const native = require('./native.js')
const { typeError, rangeError } = require('./invalidArg.js')

const internSymbol = native.__quotaShareSymbol
const selectNative = native.__quotaShareSelect
const releaseNative = native.__quotaShareRelease

// Per target, the buffer holds: execution key symbol, connection symbol (-1: none),
// weight (NaN: not a number), cap (NaN: none); after the 4·n inputs the native call writes
// the order (n indices).
const STRIDE = native.QUOTA_SHARE_SELECT_STRIDE
const NO_CONNECTION = native.QUOTA_SHARE_NO_CONNECTION

/** name → native symbol; names are the host's connection ids, execution keys and combos. */
const symbols = new Map()
/** How many names the caches may hold (re-read from the setting when they are full). */
let maxIds = native.__quotaShareMaxIds()
/** Bumped when the native side reported an evicted symbol: every cached extraction is re-read. */
let epoch = 0

function symbolOf(name) {
  let symbol = symbols.get(name)
  if (symbol === undefined) {
    if (symbols.size >= maxIds || targetSymbols.size >= maxIds) makeRoom()
    symbol = internSymbol(name)
    symbols.set(name, symbol)
  }
  return symbol
}

/** The caches are full: empty them (the native symbols they held stay valid). */
function makeRoom() {
  maxIds = native.__quotaShareMaxIds()
  if (symbols.size >= maxIds || targetSymbols.size >= maxIds) {
    symbols.clear()
    targetSymbols.clear()
  }
}

/**
 * executionKey → { symbol, connectionId, connection }: the symbols of a target's execution
 * key and of the connection it was last seen with, so reading a target costs one lookup.
 */
const targetSymbols = new Map()

function symbolsOf(executionKey, connectionId) {
  let record = targetSymbols.get(executionKey)
  if (record === undefined) {
    record = { symbol: symbolOf(executionKey), connectionId: undefined, connection: NO_CONNECTION }
    targetSymbols.set(executionKey, record)
  }
  if (record.connectionId !== connectionId) {
    record.connectionId = connectionId
    record.connection = connectionId ? symbolOf(connectionId) : NO_CONNECTION
  }
  return record
}

/**
 * Reads target `i` (validating it) into `buffer`, each field once; `record` (an Extraction
 * or null) keeps the object and the values read, to see changes on the next call.
 */
function readTarget(buffer, i, target, record) {
  if (target === null || typeof target !== 'object') throw typeError(`targets[${i}]`, 'an object', target)
  const executionKey = target.executionKey
  if (typeof executionKey !== 'string') throw typeError(`targets[${i}].executionKey`, 'a string', executionKey)
  const connectionId = target.connectionId
  if (typeof connectionId !== 'string' && connectionId !== undefined && connectionId !== null) {
    throw typeError(`targets[${i}].connectionId`, 'a string', connectionId)
  }
  const { symbol, connection } = symbolsOf(executionKey, connectionId)
  const weight = target.weight
  const at = i * STRIDE
  buffer[at] = symbol
  buffer[at + 1] = connection
  buffer[at + 2] = typeof weight === 'number' ? weight : NaN
  if (record !== null) {
    record.objects[i] = target
    record.keys[i] = executionKey
    record.connections[i] = connectionId
    record.weights[i] = weight
  }
}

/**
 * What a selection read from a targets array selected from more than once: its buffer,
 * and the objects and raw field values it was filled from (to see changes next time).
 * `busy` while a selection uses it: a selection made from inside that one (a getter or a
 * Proxy on a target, selecting from the same array) reads into a buffer of its own.
 */
class Extraction {
  constructor(count) {
    this.count = count
    this.epoch = epoch
    this.busy = true
    this.buffer = new Float64Array(count * (STRIDE + 1))
    this.objects = new Array(count).fill(null)
    this.keys = new Array(count).fill(null)
    this.connections = new Array(count).fill(null)
    this.weights = new Array(count).fill(null)
  }

  /** Reads target `i` into the buffer and the record. */
  read(i, target) {
    readTarget(this.buffer, i, target, this)
  }

  /** Reads every target. */
  readAll(targets) {
    this.epoch = epoch
    for (let i = 0; i < this.count; i++) this.read(i, targets[i])
  }

  /** Brings the record up to date, reading the targets that changed. */
  refresh(targets) {
    const { objects, keys, connections, weights } = this
    for (let i = 0; i < this.count; i++) {
      const target = targets[i]
      if (
        target !== objects[i] ||
        target.executionKey !== keys[i] ||
        target.connectionId !== connections[i] ||
        target.weight !== weights[i]
      ) {
        this.read(i, target)
      }
    }
  }
}

/** targets array → its Extraction, for arrays selected from more than once. */
const extractions = new WeakMap()
/** The last array read without an entry: a second call with it creates one. */
let lastArray = null
/**
 * A buffer no selection is using, for arrays seen once: a selection takes it and leaves it
 * (or the bigger one it made) here when it is done, so two selections never share one.
 */
let spare = null

/**
 * The Extraction of `targets`, read, up to date and marked busy, when the array is kept
 * (seen before); null for an array seen once. A busy entry is another selection's: this
 * one gets a new Extraction, which is the one kept from then on.
 */
function extractionOf(targets, count) {
  const cached = extractions.get(targets)
  if (cached !== undefined && !cached.busy && cached.count === count && cached.epoch === epoch) {
    cached.busy = true
    cached.refresh(targets)
    return cached
  }
  if (cached === undefined && targets !== lastArray) {
    lastArray = targets
    return null
  }
  lastArray = null
  const extraction = new Extraction(count)
  extraction.readAll(targets)
  extractions.set(targets, extraction)
  return extraction
}

/** The spare buffer, taken; a new one when another selection has it or it is too small. */
function takeSpare(count) {
  const buffer = spare
  spare = null
  return buffer !== null && buffer.length >= count * (STRIDE + 1) ? buffer : new Float64Array(Math.max(count, 64) * (STRIDE + 1))
}

/** Reads the first `count` targets into `buffer`; returns it. */
function readAll(buffer, targets, count) {
  for (let i = 0; i < count; i++) readTarget(buffer, i, targets[i], null)
  return buffer
}

/**
 * Writes the cap of each target (just read, so their connection ids are the ones in the
 * buffer): from `caps` (a Map id → cap) when its value is a number, else NaN (no cap).
 */
function fillCaps(buffer, caps, targets, count) {
  for (let i = 0, at = 3; i < count; i++, at += STRIDE) {
    let cap = NaN
    if (caps !== undefined && buffer[at - 2] !== NO_CONNECTION) {
      const value = caps.get(targets[i].connectionId)
      if (typeof value === 'number') cap = value
    }
    buffer[at] = cap
  }
}

const noop = () => {}

function readCaps(options) {
  if (options === undefined || options === null) return undefined
  if (typeof options !== 'object') throw typeError('options', 'an object', options)
  const caps = options.maxConcurrentByConnection
  if (caps === undefined || caps === null) return undefined
  if (!(caps instanceof Map)) throw typeError('options.maxConcurrentByConnection', 'a Map', caps)
  return caps.size === 0 ? undefined : caps
}

/**
 * Chooses among a pool combo's targets: see lib/quotaShareStrategy.d.ts (docs/contract.md §10).
 */
function selectQuotaShareTarget(targets, comboName, modelStr, nowMs = Date.now(), options = undefined) {
  if (!Array.isArray(targets)) throw typeError('targets', 'an array', targets)
  if (typeof comboName !== 'string') throw typeError('comboName', 'a string', comboName)
  if (modelStr !== undefined && modelStr !== null && typeof modelStr !== 'string') {
    throw typeError('modelStr', 'a string', modelStr)
  }
  if (nowMs === null) nowMs = Date.now()
  if (typeof nowMs !== 'number') throw typeError('nowMs', 'a number', nowMs)
  if (!Number.isFinite(nowMs)) throw rangeError('nowMs', `must be a finite number of milliseconds, got ${nowMs}`)
  const caps = readCaps(options)

  const count = targets.length
  if (count === 0) return { target: null, orderedTargets: [], decrementInflight: noop }

  const extraction = extractionOf(targets, count)
  const buffer = extraction === null ? readAll(takeSpare(count), targets, count) : extraction.buffer
  for (let attempt = 0; ; attempt++) {
    fillCaps(buffer, caps, targets, count)
    if (selectNative(symbolOf(comboName), modelStr ?? null, nowMs, count, buffer)) break
    // A symbol held here was evicted natively: forget every cached symbol and re-intern.
    // The names just interned are the most recently used, so a retry finds them current
    // unless one selection names more than the bound allows.
    if (attempt === 2) throw new Error(`selectQuotaShareTarget: ${count} targets do not fit QUOTA_SCHEDULER_MAX_IDS (${maxIds})`)
    symbols.clear()
    targetSymbols.clear()
    epoch++
    if (extraction === null) readAll(buffer, targets, count)
    else extraction.readAll(targets)
  }

  const base = count * STRIDE
  const winnerConnection = buffer[buffer[base] * STRIDE + 1]
  const orderedTargets = new Array(count)
  for (let i = 0; i < count; i++) orderedTargets[i] = targets[buffer[base + i]]
  // Done with the buffer: the next selection may have it.
  if (extraction !== null) extraction.busy = false
  else if (spare === null || spare.length < buffer.length) spare = buffer

  let decrementInflight = noop
  if (winnerConnection !== NO_CONNECTION) {
    let released = false
    decrementInflight = () => {
      if (released) return
      released = true
      releaseNative(winnerConnection, nowMs)
    }
  }
  return { target: orderedTargets[0], orderedTargets, decrementInflight }
}

/** Tests only: how many names this isolate's caches hold. */
function _getQuotaShareCacheSizesForTest() {
  return { symbols: symbols.size, targets: targetSymbols.size }
}

module.exports = {
  selectQuotaShareTarget,
  _getQuotaShareCacheSizesForTest,
  _clearDrrStateForTest: native._clearDrrStateForTest,
  _getDrrDeficitForTest: native._getDrrDeficitForTest,
}
