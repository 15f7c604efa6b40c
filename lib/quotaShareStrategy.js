'use strict'
// selectQuotaShareTarget (docs/contract.md §10): the JavaScript shell of the native selection.
//
// The host's API needs two JavaScript idioms — the result holds the host's own target
// objects, and `decrementInflight` is a closure — so this thin wrapper exists. It holds no
// algorithm: it reads the fields the selection needs into a Float64Array of its own, makes
// ONE native call (`__quotaShareSelect`, src/binding/quota_share.rs), and maps the order the
// call writes back (indices) onto the host's objects.
//
// - Each selection reads each target's fields once, into a buffer it allocates: nothing is
//   shared between calls, so a selection made from inside another (a getter or a Proxy on a
//   target) reads into its own. The host builds its targets array per request, so there is
//   nothing to gain from keeping what an array held.
// - No string crosses per target: connection ids, execution keys and combo names are
//   interned once to numeric symbols by the native side (`__quotaShareSymbol`) and cached
//   here in Maps. The request's model string is the only string that crosses per call; it
//   is never interned (it comes from the request body, an unbounded set).
// - The native table is bounded (QUOTA_SCHEDULER_MAX_IDS, docs/scheduler.md "A bound on
//   names"): it evicts the least recently used names, and a symbol is never reused for
//   another name. A selection given an evicted symbol selects nothing and returns -1;
//   this shell then empties its caches, re-interns the names it read and retries. The
//   caches here hold at most the same bound of names (emptied when full).

const { isMap } = require('node:util/types')
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

function checkObject(i, target) {
  if (target === null || typeof target !== 'object') throw typeError(`targets[${i}]`, 'an object', target)
}

function checkNames(i, executionKey, connectionId) {
  if (typeof executionKey !== 'string') throw typeError(`targets[${i}].executionKey`, 'a string', executionKey)
  if (typeof connectionId !== 'string' && connectionId !== undefined && connectionId !== null) {
    throw typeError(`targets[${i}].connectionId`, 'a string', connectionId)
  }
}

/**
 * A Float64Array of `length` for one selection, carved from a slab of this module's: a
 * Float64Array of its own would allocate a backing store per call (an ArrayBuffer and a
 * malloc), more than the whole native call at 2 targets. A region is handed out once and
 * never again (a full slab is left to the collector once its selections are done), and the
 * slab is reachable only through these views, so no other selection or code can write into
 * it. Every slot a selection reads is written first.
 */
const SLAB_BYTES = 8192
let slab = new ArrayBuffer(SLAB_BYTES)
let slabOffset = 0

function newBuffer(length) {
  const bytes = length * 8
  if (bytes > SLAB_BYTES / 2) return new Float64Array(length)
  if (slabOffset + bytes > SLAB_BYTES) {
    slab = new ArrayBuffer(SLAB_BYTES)
    slabOffset = 0
  }
  const buffer = new Float64Array(slab, slabOffset, length)
  slabOffset += bytes
  return buffer
}

/**
 * What one selection read from its targets: the buffer the native call reads (per target:
 * execution key symbol, connection symbol (-1: none), weight (NaN: not a number), cap
 * (NaN: none); after the 4·n inputs the call writes the order), the objects it was filled
 * from, and their names (execution key, connection id, per target). Each field and element
 * is read once: the caps are looked up by the connection ids as read, and the answer and a
 * retry use what was read, never a second read of the host's objects.
 */
function readTargets(targets, count, caps) {
  const buffer = newBuffer(count * (STRIDE + 1))
  const objects = new Array(count)
  const names = new Array(2 * count)
  for (let i = 0, at = 0; i < count; i++, at += STRIDE) {
    const target = targets[i]
    checkObject(i, target)
    const executionKey = target.executionKey
    const connectionId = target.connectionId
    const weight = target.weight
    checkNames(i, executionKey, connectionId)
    objects[i] = target
    names[2 * i] = executionKey
    names[2 * i + 1] = connectionId
    buffer[at + 2] = typeof weight === 'number' ? weight : NaN
    const cap = caps !== undefined && connectionId ? caps.get(connectionId) : undefined
    buffer[at + 3] = typeof cap === 'number' ? cap : NaN
  }
  return { count, buffer, objects, names }
}

/** Writes the symbols of each target's names (interning those not cached). */
function writeSymbols({ count, buffer, names }) {
  for (let i = 0, at = 0; i < count; i++, at += STRIDE) {
    const { symbol, connection } = symbolsOf(names[2 * i], names[2 * i + 1])
    buffer[at] = symbol
    buffer[at + 1] = connection
  }
}

const noop = () => {}

/** The least QUOTA_SCHEDULER_MAX_IDS can be (src/engine/config.rs): a selection of fewer names always fits. */
const SMALLEST_MAX_IDS = 1000

/**
 * A selection that may name more than QUOTA_SCHEDULER_MAX_IDS names (its execution keys,
 * connection ids and combo) is counted before any name is interned: interning past the
 * bound forgets the least recently used names with their state, other requests' in-flight
 * leases included, so a selection refused for its size must intern nothing.
 */
function checkNamesFit({ names }, comboName) {
  // Read again, not the read made before the targets were: the host's getters have run
  // since, and may have changed the setting.
  maxIds = native.__quotaShareMaxIds()
  if (names.length + 1 <= maxIds) return
  // Every execution key is a name (the empty one too); a connection id only when set.
  const distinct = new Set([comboName])
  for (let i = 0; i < names.length; i += 2) {
    distinct.add(names[i])
    if (names[i + 1]) distinct.add(names[i + 1])
  }
  if (distinct.size > maxIds) {
    throw rangeError('targets', `name ${distinct.size} execution keys, connection ids and a combo, more than QUOTA_SCHEDULER_MAX_IDS (${maxIds})`)
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
  // A Map, or a Proxy of one that passes Map's methods through to it (a reactive wrapper):
  // one that does not, or is revoked, fails here with the field named, not in Map's code.
  let size
  try {
    size = isMap(caps) || caps instanceof Map ? caps.size : undefined
  } catch {}
  if (typeof size !== 'number') throw typeError('options.maxConcurrentByConnection', 'a Map', caps)
  return size === 0 ? undefined : caps
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

  if (count > SMALLEST_MAX_IDS) {
    maxIds = native.__quotaShareMaxIds()
    if (count > maxIds) throw rangeError('targets', `holds ${count} targets, more than QUOTA_SCHEDULER_MAX_IDS (${maxIds}) names`)
  }
  const read = readTargets(targets, count, caps)
  if (2 * count + 1 > SMALLEST_MAX_IDS) checkNamesFit(read, comboName)
  writeSymbols(read)
  const buffer = read.buffer
  let length
  for (let attempt = 0; ; attempt++) {
    length = selectNative(symbolOf(comboName), modelStr ?? null, nowMs, count, buffer)
    if (length >= 0) break
    // A symbol held here was evicted natively: forget every cached symbol and re-intern.
    // The names just interned are the most recently used, so a retry finds them current
    // unless other threads' selections evict them again in between.
    if (attempt === 2) throw rangeError('targets', `${count} targets do not fit QUOTA_SCHEDULER_MAX_IDS (${maxIds})`)
    symbols.clear()
    targetSymbols.clear()
    writeSymbols(read)
  }

  // From here nothing reads the host's objects again, so nothing can throw while a lease
  // is held: the answer is built from the objects as they were read.
  const base = count * STRIDE
  const winnerConnection = buffer[buffer[base] * STRIDE + 1]
  const objects = read.objects
  const orderedTargets = new Array(length)
  for (let i = 0; i < length; i++) orderedTargets[i] = objects[buffer[base + i]]

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
