'use strict'
// selectQuotaShareTarget (CONTRACT §10): the JavaScript shell of the native selection.
//
// The host's API needs two JavaScript idioms — the result holds the host's own target
// objects, and `decrementInflight` is a closure — so this thin wrapper exists. It holds no
// algorithm: it reads the fields the selection needs into one Float64Array, makes ONE
// native call (`__quotaShareSelect`, src/binding/quota_share.rs), and maps the order the
// call writes back (indices) onto the host's objects.
//
// Crossing cost is the whole game at 2–8 targets, so strings never cross on the hot path:
// connection ids, execution keys and combo names are interned once to numeric symbols by
// the native side (`__quotaShareSymbol`) and cached here in a Map (string keys hash once
// and are looked up in ~10 ns). The request's model string is the only string that crosses
// per call; it is never interned (it comes from the request, an unbounded set).
const native = require('../binding.js')
const { typeError, rangeError } = require('./invalidArg.js')

const { __quotaShareSymbol: internSymbol, __quotaShareSelect: selectNative, __quotaShareRelease: releaseNative } = native

/** name → native symbol; names are the host's connection ids, execution keys and combos. */
const symbols = new Map()

function symbolOf(name) {
  let symbol = symbols.get(name)
  if (symbol === undefined) {
    symbol = internSymbol(name)
    symbols.set(name, symbol)
  }
  return symbol
}

// Per target: execution key symbol, connection symbol (-1: none), weight, cap; then the
// order (indices) the native call writes back after the 4·n inputs. Grown on demand and
// reused: the selection is synchronous and never re-entered.
const STRIDE = 4
const NO_CONNECTION = -1
let buffer = new Float64Array(64 * (STRIDE + 1))

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
 * Chooses among a pool combo's targets: see index.d.ts (CONTRACT §10).
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

  if (buffer.length < count * (STRIDE + 1)) buffer = new Float64Array(count * 2 * (STRIDE + 1))
  const input = buffer
  for (let i = 0, at = 0; i < count; i++, at += STRIDE) {
    const target = targets[i]
    if (target === null || typeof target !== 'object') throw typeError(`targets[${i}]`, 'an object', target)
    const executionKey = target.executionKey
    if (typeof executionKey !== 'string') throw typeError(`targets[${i}].executionKey`, 'a string', executionKey)
    const connectionId = target.connectionId
    let connection = NO_CONNECTION
    let cap = NaN
    if (typeof connectionId === 'string') {
      if (connectionId !== '') {
        connection = symbolOf(connectionId)
        if (caps !== undefined) {
          const value = caps.get(connectionId)
          if (typeof value === 'number') cap = value
        }
      }
    } else if (connectionId !== undefined && connectionId !== null) {
      throw typeError(`targets[${i}].connectionId`, 'a string', connectionId)
    }
    const weight = target.weight
    input[at] = symbolOf(executionKey)
    input[at + 1] = connection
    input[at + 2] = typeof weight === 'number' ? weight : NaN
    input[at + 3] = cap
  }

  selectNative(symbolOf(comboName), modelStr ?? null, nowMs, count, input)

  const base = count * STRIDE
  const orderedTargets = new Array(count)
  for (let i = 0; i < count; i++) orderedTargets[i] = targets[input[base + i]]
  const winnerConnection = input[input[base] * STRIDE + 1]

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

module.exports = {
  selectQuotaShareTarget,
  _clearDrrStateForTest: native._clearDrrStateForTest,
  _getDrrDeficitForTest: native._getDrrDeficitForTest,
}
