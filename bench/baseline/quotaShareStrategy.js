'use strict'
// The benchmark's baseline: the quota-share scheduler of docs/contract.md §10 in plain JavaScript,
// written the way the host's TypeScript modules are (Maps keyed by strings, one object per
// slot or bucket), with the same rules and the same tie-breaks as the host's module and the
// native engine — the rest with room in input order without the winner's execution key,
// lazy bucket resets in 5h, 7d, 7d:<model> order, P2C with the first of the rest on
// strictly fewer in flight. Only for comparison: nothing in the package uses it.

const DEFAULT_LEASE_MS = 120_000
const SATURATION_THRESHOLD_PCT = 100
const MAX_DRR_COMBOS = 200

// In-flight leases: connectionId → { count, expiresAt }.
const inflight = new Map()

function incrementInflight(connectionId, leaseMs = DEFAULT_LEASE_MS, nowMs = Date.now()) {
  if (!connectionId) return 0
  for (const [id, slot] of inflight) if (nowMs >= slot.expiresAt) inflight.delete(id)
  const slot = inflight.get(connectionId)
  const count = (slot ? slot.count : 0) + 1
  inflight.set(connectionId, { count, expiresAt: nowMs + leaseMs })
  return count
}

function decrementInflight(connectionId, nowMs = Date.now()) {
  if (!connectionId) return
  const slot = inflight.get(connectionId)
  if (!slot) return
  if (nowMs >= slot.expiresAt || slot.count <= 1) inflight.delete(connectionId)
  else slot.count -= 1
}

function getInflight(connectionId, nowMs = Date.now()) {
  if (!connectionId) return 0
  const slot = inflight.get(connectionId)
  return slot && nowMs < slot.expiresAt ? slot.count : 0
}

// Account buckets: connectionId → Map(windowKey → { resetAtMs | null }). Nested rather than
// one "<id>|<window>" key, so a lookup builds no string.
const buckets = new Map()

function recordUsage(connectionId, windowKey, usedPct, resetAt, nowMs = Date.now()) {
  if (!connectionId || !windowKey) return
  const resetAtMs = resetAt ? Date.parse(resetAt) : null
  const windows = buckets.get(connectionId)
  if ((resetAtMs !== null && resetAtMs <= nowMs) || !Number.isFinite(usedPct) || usedPct < SATURATION_THRESHOLD_PCT) {
    if (windows) {
      windows.delete(windowKey)
      if (windows.size === 0) buckets.delete(connectionId)
    }
    return
  }
  if (windows) windows.set(windowKey, { resetAtMs })
  else buckets.set(connectionId, new Map([[windowKey, { resetAtMs }]]))
}

function isBucketSaturated(connectionId, windowKey, nowMs = Date.now()) {
  const windows = buckets.get(connectionId)
  const entry = windows?.get(windowKey)
  if (!entry) return false
  if (entry.resetAtMs !== null && nowMs >= entry.resetAtMs) {
    windows.delete(windowKey)
    if (windows.size === 0) buckets.delete(connectionId)
    return false
  }
  return true
}

// DRR: comboName → Map(executionKey → deficit); Map order is insertion order.
const drrState = new Map()

function comboState(comboName) {
  let state = drrState.get(comboName)
  if (!state) {
    while (drrState.size >= MAX_DRR_COMBOS) drrState.delete(drrState.keys().next().value)
    state = new Map()
    drrState.set(comboName, state)
  }
  return state
}

const weightOf = (target) => (Number.isFinite(target.weight) && target.weight > 0 ? target.weight : 1)

/**
 * DRR over the targets with room: the winner (the largest deficit after this round's
 * credit, ties in input order), which pays 1, then the rest in input order without the
 * winner's execution key.
 */
function drrOrder(comboName, room) {
  if (room.length === 1) return room
  const state = comboState(comboName)
  let total = 0
  for (const target of room) total += weightOf(target)
  for (const target of room) state.set(target.executionKey, (state.get(target.executionKey) ?? 0) + weightOf(target) / total)
  let winner = room[0]
  let best = state.get(winner.executionKey)
  for (let i = 1; i < room.length; i++) {
    const deficit = state.get(room[i].executionKey)
    if (deficit > best) {
      best = deficit
      winner = room[i]
    }
  }
  state.set(winner.executionKey, best - 1)
  return [winner, ...room.filter((target) => target.executionKey !== winner.executionKey)]
}

function modelOf(modelStr) {
  if (typeof modelStr !== 'string') return null
  const slash = modelStr.indexOf('/')
  return slash === -1 ? modelStr : modelStr.slice(slash + 1)
}

function isSaturated(target, modelWindow, nowMs) {
  const id = target.connectionId
  if (!id || !buckets.has(id)) return false
  return (
    isBucketSaturated(id, '5h', nowMs) ||
    isBucketSaturated(id, '7d', nowMs) ||
    (modelWindow !== null && isBucketSaturated(id, modelWindow, nowMs))
  )
}

const noop = () => {}

function selectQuotaShareTarget(targets, comboName, modelStr, nowMs = Date.now(), options = undefined) {
  if (targets.length === 0) return { target: null, orderedTargets: [], decrementInflight: noop }
  const model = modelOf(modelStr)
  const modelWindow = model === null ? null : `7d:${model}`

  let eligible = []
  let saturated = []
  for (const target of targets) (isSaturated(target, modelWindow, nowMs) ? saturated : eligible).push(target)
  if (eligible.length === 0) {
    eligible = saturated
    saturated = []
  }

  const caps = options?.maxConcurrentByConnection
  let room = eligible
  let atCap = []
  if (caps && caps.size > 0) {
    room = []
    for (const target of eligible) {
      const cap = target.connectionId ? caps.get(target.connectionId) : undefined
      const capped = typeof cap === 'number' && Number.isFinite(cap) && cap > 0 && getInflight(target.connectionId, nowMs) >= cap
      ;(capped ? atCap : room).push(target)
    }
    if (room.length === 0) {
      room = eligible
      atCap = []
    }
  }

  const ordered = drrOrder(comboName, room)
  // P2C: the runner-up (the first of the rest) wins only with strictly fewer in flight.
  let chosen = 0
  if (ordered.length > 1 && getInflight(ordered[1].connectionId, nowMs) < getInflight(ordered[0].connectionId, nowMs)) chosen = 1
  const winner = ordered[chosen]
  incrementInflight(winner.connectionId, DEFAULT_LEASE_MS, nowMs)

  const orderedTargets = [winner]
  for (let i = 0; i < ordered.length; i++) if (i !== chosen) orderedTargets.push(ordered[i])
  for (const target of atCap) orderedTargets.push(target)
  for (const target of saturated) orderedTargets.push(target)

  let released = false
  const connectionId = winner.connectionId
  return {
    target: winner,
    orderedTargets,
    decrementInflight: () => {
      if (released) return
      released = true
      decrementInflight(connectionId, nowMs)
    },
  }
}

function _clearForBench() {
  inflight.clear()
  buckets.clear()
  drrState.clear()
}

module.exports = {
  DEFAULT_LEASE_MS,
  incrementInflight,
  decrementInflight,
  getInflight,
  recordUsage,
  isBucketSaturated,
  selectQuotaShareTarget,
  _getDrrDeficitForTest: (combo, key) => drrState.get(combo)?.get(key) ?? 0,
  _clearForBench,
}
