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
//   another name. A selection given an evicted symbol selects nothing and returns -1;
//   this shell then empties its caches, re-interns and retries. The caches here hold at
//   most the same bound of names (emptied when full).

const native = require('./native.js')
const { typeError, rangeError } = require('./invalidArg.js')

const internSymbol = native.__quotaShareSymbol
const selectNative = native.__quotaShareSelect
const releaseNative = native.__quotaShareRelease

// Per target, the buffer holds: execution key symbol, connection symbol (-1: none),
// weight (NaN: not a number), cap (NaN: none); after the 4·n inputs the native call writes
// the order (at most n indices; it returns how many).
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
 * Reads target `i` (validating it) into `record`'s buffer, each field once, and keeps the
 * object and the values read: the caps, the answer and the next call's change check use
 * these, never a second read of the host's objects.
 */
function readTarget(record, i, target) {
  checkObject(i, target)
  writeTarget(record, i, target, target.executionKey, target.connectionId, target.weight)
}

function checkObject(i, target) {
  if (target === null || typeof target !== 'object') throw typeError(`targets[${i}]`, 'an object', target)
}

function checkNames(i, executionKey, connectionId) {
  if (typeof executionKey !== 'string') throw typeError(`targets[${i}].executionKey`, 'a string', executionKey)
  if (typeof connectionId !== 'string' && connectionId !== undefined && connectionId !== null) {
    throw typeError(`targets[${i}].connectionId`, 'a string', connectionId)
  }
}

/** Validates the fields read from target `i` and writes them into `record`. */
function writeTarget(record, i, target, executionKey, connectionId, weight) {
  checkNames(i, executionKey, connectionId)
  const { symbol, connection } = symbolsOf(executionKey, connectionId)
  const buffer = record.buffer
  const at = i * STRIDE
  buffer[at] = symbol
  buffer[at + 1] = connection
  buffer[at + 2] = typeof weight === 'number' ? weight : NaN
  record.objects[i] = target
  record.keys[i] = executionKey
  record.connections[i] = connectionId
  record.weights[i] = weight
}

/**
 * What a selection read from a targets array: its buffer, and the objects and raw field
 * values it was filled from. Kept for an array selected from more than once (to see
 * changes next time); for an array seen once, the spare's. `busy` while a selection uses
 * it: a selection made from inside that one (a getter or a Proxy on a target) reads into
 * one of its own. `capacity` targets fit; a selection uses the first `count`.
 */
class Extraction {
  constructor(count, capacity = count) {
    this.count = count
    this.capacity = capacity
    this.epoch = epoch
    this.busy = true
    this.buffer = new Float64Array(capacity * (STRIDE + 1))
    this.objects = new Array(capacity).fill(null)
    this.keys = new Array(capacity).fill(null)
    this.connections = new Array(capacity).fill(null)
    this.weights = new Array(capacity).fill(null)
  }

  /** Reads target `i` into the buffer and the record. */
  read(i, target) {
    readTarget(this, i, target)
  }

  /** Reads every target. */
  readAll(targets) {
    this.epoch = epoch
    for (let i = 0; i < this.count; i++) this.read(i, targets[i])
  }

  /** Brings the record up to date: each field read once, the targets that changed rewritten. */
  refresh(targets) {
    const { objects, keys, connections, weights } = this
    for (let i = 0; i < this.count; i++) {
      const target = targets[i]
      checkObject(i, target)
      const executionKey = target.executionKey
      const connectionId = target.connectionId
      const weight = target.weight
      if (target !== objects[i] || executionKey !== keys[i] || connectionId !== connections[i] || weight !== weights[i]) {
        writeTarget(this, i, target, executionKey, connectionId, weight)
      }
    }
  }

  /** Lets go of the host's values from target `from` on (before reading fewer targets). */
  forget(from) {
    this.objects.fill(null, from, this.count)
    this.weights.fill(null, from, this.count)
  }
}

/** targets array → its Extraction, for arrays selected from more than once. */
const extractions = new WeakMap()
/** The last array read without an entry: a second call with it creates one. */
let lastArray = null
/**
 * An Extraction no selection is using, for arrays seen once: a selection takes it and
 * leaves it (or the bigger one it made) here when it is done, so two selections never
 * share one.
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

/** The spare Extraction, taken and read; a new one when another selection has it or it is too small. */
function readOnce(targets, count) {
  let extraction = spare
  spare = null
  if (extraction === null || extraction.capacity < count) extraction = new Extraction(count, Math.max(count, 64))
  else if (extraction.count > count) extraction.forget(count) // a larger array's objects, read before
  extraction.count = count
  extraction.busy = true
  extraction.readAll(targets)
  return extraction
}

/**
 * Writes the cap of each target (its connection id as just read): from `caps` (a Map
 * id → cap) when its value is a number, else NaN (no cap).
 */
function fillCaps(extraction, caps) {
  const { buffer, connections, count } = extraction
  for (let i = 0, at = 3; i < count; i++, at += STRIDE) {
    let cap = NaN
    if (caps !== undefined && buffer[at - 2] !== NO_CONNECTION) {
      const value = caps.get(connections[i])
      if (typeof value === 'number') cap = value
    }
    buffer[at] = cap
  }
}

const noop = () => {}

/** The least QUOTA_SCHEDULER_MAX_IDS can be (src/engine/config.rs): a selection of fewer names always fits. */
const SMALLEST_MAX_IDS = 1000

/**
 * A selection that may name more than QUOTA_SCHEDULER_MAX_IDS names (its execution keys,
 * connection ids and combo) is counted before any name is interned: interning past the
 * bound forgets the least recently used names with their state, other requests' in-flight
 * leases included, so a selection refused for its size must intern nothing. This reads
 * the targets' names once more, only for selections this large.
 */
function checkNamesFit(targets, count, comboName) {
  maxIds = native.__quotaShareMaxIds()
  if (2 * count + 1 <= maxIds) return
  if (count > maxIds) throw rangeError('targets', `holds ${count} targets, more than QUOTA_SCHEDULER_MAX_IDS (${maxIds}) names`)
  const names = new Set([comboName])
  for (let i = 0; i < count; i++) {
    const target = targets[i]
    checkObject(i, target)
    const executionKey = target.executionKey
    const connectionId = target.connectionId
    checkNames(i, executionKey, connectionId)
    names.add(executionKey)
    if (connectionId) names.add(connectionId)
  }
  if (names.size > maxIds) {
    throw rangeError('targets', `name ${names.size} execution keys, connection ids and a combo, more than QUOTA_SCHEDULER_MAX_IDS (${maxIds})`)
  }
}

/** `Array.isArray`, with a revoked Proxy (which makes it throw) no array, as the engine reads one. */
function isArray(value) {
  try {
    return Array.isArray(value)
  } catch {
    return false
  }
}

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
  if (!isArray(targets)) throw typeError('targets', 'an array', targets)
  if (typeof comboName !== 'string') throw typeError('comboName', 'a string', comboName)
  if (modelStr !== undefined && modelStr !== null && typeof modelStr !== 'string') {
    throw typeError('modelStr', 'a string', modelStr)
  }
  if (nowMs === null) nowMs = Date.now()
  if (typeof nowMs !== 'number') throw typeError('nowMs', 'a number', nowMs)
  if (!Number.isFinite(nowMs)) throw rangeError('nowMs', `must be a finite number of milliseconds, got ${nowMs}`)
  const caps = readCaps(options)

  // A Proxy of an array answers any length: only a real one is read, and never more
  // targets than the scheduler can name at once.
  const count = targets.length
  if (!Number.isInteger(count) || count < 0) throw rangeError('targets', `must have a whole-number length, got ${String(count)}`)
  if (count === 0) return { target: null, orderedTargets: [], decrementInflight: noop }
  if (2 * count + 1 > SMALLEST_MAX_IDS) checkNamesFit(targets, count, comboName)

  const kept = extractionOf(targets, count)
  const extraction = kept ?? readOnce(targets, count)
  const buffer = extraction.buffer
  let length
  for (let attempt = 0; ; attempt++) {
    fillCaps(extraction, caps)
    length = selectNative(symbolOf(comboName), modelStr ?? null, nowMs, count, buffer)
    if (length >= 0) break
    // A symbol held here was evicted natively: forget every cached symbol and re-intern.
    // The names just interned are the most recently used, so a retry finds them current
    // unless one selection names more than the bound allows.
    if (attempt === 2) throw rangeError('targets', `${count} targets do not fit QUOTA_SCHEDULER_MAX_IDS (${maxIds})`)
    symbols.clear()
    targetSymbols.clear()
    epoch++
    extraction.readAll(targets)
  }

  // From here nothing reads the host's objects again, so nothing can throw while a lease
  // is held: the answer is built from the objects as they were read.
  const base = count * STRIDE
  const winnerConnection = buffer[buffer[base] * STRIDE + 1]
  const objects = extraction.objects
  const orderedTargets = new Array(length)
  for (let i = 0; i < length; i++) orderedTargets[i] = objects[buffer[base + i]]
  // Done with the extraction: the next selection may have it.
  extraction.busy = false
  // The spare keeps the last objects it read until the next selection overwrites them (or
  // forgets those it does not), as a kept extraction keeps its array's.
  if (kept === null && (spare === null || spare.capacity < extraction.capacity)) spare = extraction

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
