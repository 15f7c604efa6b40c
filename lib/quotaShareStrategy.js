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
// - The native table is bounded (QUOTA_SCHEDULER_MAX_IDS, docs/scheduler.md "A bound on
//   names"): it evicts the least recently used names, and a symbol is never reused for
//   another name. A selection given an evicted symbol selects nothing and writes STALE;
//   this shell then empties its caches, re-interns and retries. The caches here hold at
//   most the same bound of names (emptied when full).

const native = require('./native.js')
const { typeError, rangeError } = require('./invalidArg.js')

const internSymbol = native.__quotaShareSymbol
const { select: selectNative, release: releaseNative } = native.__quotaShareCrossing()

// Per target, the buffer holds: execution key symbol, connection symbol (-1: none),
// weight (NaN: not a number), cap (NaN: none); after the 4·n inputs the native call writes
// the order (n indices).
const STRIDE = native.QUOTA_SHARE_SELECT_STRIDE
const NO_CONNECTION = native.QUOTA_SHARE_NO_CONNECTION
const STALE = native.QUOTA_SHARE_STALE

/** name → native symbol; names are the host's connection ids, execution keys and combos. */
const symbols = new Map()
/** How many names the caches may hold (re-read from the setting when they are full). */
let maxIds = native.__quotaShareMaxIds()
/** Bumped when the native side reported an evicted symbol: every extraction is re-read. */
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
 * What was read from one targets array: the buffer of the crossing, and the objects and
 * raw field values it was filled from (to see changes). `capacity` targets fit; a call
 * uses the first `count`.
 */
class Extraction {
  /** `recording`: keep the objects and values read, to see changes on the next call. */
  constructor(capacity, recording) {
    this.capacity = capacity
    this.recording = recording
    this.epoch = epoch
    this.buffer = new Float64Array(capacity * (STRIDE + 1))
    this.objects = recording ? new Array(capacity).fill(null) : null
    this.keys = recording ? new Array(capacity).fill(null) : null
    this.connections = recording ? new Array(capacity).fill(null) : null
    this.weights = recording ? new Array(capacity).fill(null) : null
  }

  /** Reads target `i` (validating it) into the buffer and the record. */
  read(i, target) {
    if (target === null || typeof target !== 'object') throw typeError(`targets[${i}]`, 'an object', target)
    const executionKey = target.executionKey
    if (typeof executionKey !== 'string') throw typeError(`targets[${i}].executionKey`, 'a string', executionKey)
    const connectionId = target.connectionId
    if (typeof connectionId !== 'string' && connectionId !== undefined && connectionId !== null) {
      throw typeError(`targets[${i}].connectionId`, 'a string', connectionId)
    }
    const symbols = symbolsOf(executionKey, connectionId)
    const weight = target.weight
    const at = i * STRIDE
    this.buffer[at] = symbols.symbol
    this.buffer[at + 1] = symbols.connection
    this.buffer[at + 2] = typeof weight === 'number' ? weight : NaN
    if (this.recording) {
      this.objects[i] = target
      this.keys[i] = executionKey
      this.connections[i] = connectionId
      this.weights[i] = weight
    }
  }

  /** Reads the first `count` targets. */
  readAll(targets, count) {
    this.epoch = epoch
    for (let i = 0; i < count; i++) this.read(i, targets[i])
  }

  /** Brings the record of the first `count` targets up to date, reading what changed. */
  refresh(targets, count) {
    const { objects, keys, connections, weights } = this
    for (let i = 0; i < count; i++) {
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

  /**
   * Writes the cap of each of the first `count` targets (just read, so their connection
   * ids are the ones in the buffer): from `caps` (a Map id → cap)
   * when its value is a number, else NaN (no cap). Every slot is written on every call:
   * a slot may hold the order a smaller selection wrote back into this buffer.
   */
  fillCaps(caps, targets, count) {
    const buffer = this.buffer
    for (let i = 0, at = 3; i < count; i++, at += STRIDE) {
      let cap = NaN
      if (caps !== undefined && buffer[at - 2] !== NO_CONNECTION) {
        const value = caps.get(targets[i].connectionId)
        if (typeof value === 'number') cap = value
      }
      buffer[at] = cap
    }
  }
}

/** targets array → its Extraction, for arrays selected from more than once. */
const extractions = new WeakMap()
/** The last array read without a cache entry: a second call with it creates one. */
let lastArray = null
/** The extraction of arrays seen once, reused (grown on demand). */
let scratch = new Extraction(64, false)

/** How many selections are reading targets now: more than one when a getter or a Proxy
 * on a target selects again. */
let reading = 0

function extract(targets, count) {
  if (reading > 1) {
    // A nested selection: its own extraction, so it touches neither the outer one's
    // buffer nor the caches the outer one is reading through.
    const own = new Extraction(count, false)
    own.readAll(targets, count)
    return own
  }
  const cached = extractions.get(targets)
  if (cached !== undefined && cached.capacity === count && cached.epoch === epoch) {
    cached.refresh(targets, count)
    return cached
  }
  let extraction
  if (targets === lastArray || cached !== undefined) {
    extraction = new Extraction(count, true)
    extractions.set(targets, extraction)
    lastArray = null
  } else {
    if (scratch.capacity < count) scratch = new Extraction(Math.max(count, scratch.capacity * 2), false)
    extraction = scratch
    lastArray = targets
  }
  extraction.readAll(targets, count)
  return extraction
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

  const base = count * STRIDE
  let buffer
  for (let attempt = 0; ; attempt++) {
    reading++
    try {
      const extraction = extract(targets, count)
      extraction.fillCaps(caps, targets, count)
      buffer = extraction.buffer
    } finally {
      reading--
    }
    selectNative(symbolOf(comboName), modelStr ?? null, nowMs, count, buffer)
    if (buffer[base] !== STALE) break
    // A symbol held here was evicted natively: forget every cached symbol and re-intern.
    // The names just interned are the most recently used, so a retry finds them current
    // unless one selection names more than the bound allows.
    if (attempt === 2) throw new Error(`selectQuotaShareTarget: ${count} targets do not fit QUOTA_SCHEDULER_MAX_IDS (${maxIds})`)
    symbols.clear()
    targetSymbols.clear()
    epoch++
  }

  // Taken out of the buffer before any target is read again: a Proxy's `get` may select
  // again and reuse it.
  const winnerConnection = buffer[buffer[base] * STRIDE + 1]
  const order = buffer.slice(base, base + count)
  const orderedTargets = new Array(count)
  for (let i = 0; i < count; i++) orderedTargets[i] = targets[order[i]]

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
