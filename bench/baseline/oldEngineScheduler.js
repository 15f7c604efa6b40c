'use strict'
// The benchmark's "old engine": the quota-share scheduler as the host's own TypeScript
// (its scheduler, in-flight and account-bucket modules, which the compat/ entries replace:
// docs/integration.md) runs it, step for step, so the engine is measured against what the
// host would otherwise run. The steps that cost, as the host takes them:
// - one bucket Map keyed by `${connectionId}::${windowKey}`, a string built per lookup, and
//   the `7d:${model}` window built per target;
// - the saturated tail found by `includes` on the eligible array (quadratic in the targets);
// - a new slot object per in-flight change, every slot scanned for expiry per increment;
// - the DRR order built with filter and spreads, the final order with spreads.
// Same rules and tie-breaks as the native engine (bench/scheduler.mjs checks every choice).
// Only for comparison: nothing in the package uses it.

const LEASE_MS = 120_000
const SATURATED_AT_PCT = 100
const MAX_COMBOS = 200

const slots = new Map()

function pruneExpiredSlots(nowMs) {
  for (const [id, slot] of slots) if (slot.expiresAtMs <= nowMs) slots.delete(id)
}

function inflightOf(connectionId, nowMs) {
  if (!connectionId) return 0
  const slot = slots.get(connectionId)
  return !slot || slot.expiresAtMs <= nowMs ? 0 : slot.count
}

function acquire(connectionId, nowMs) {
  if (!connectionId) return
  pruneExpiredSlots(nowMs)
  const slot = slots.get(connectionId)
  const before = slot && slot.expiresAtMs > nowMs ? slot.count : 0
  slots.set(connectionId, { count: before + 1, expiresAtMs: nowMs + LEASE_MS })
}

function release(connectionId, nowMs) {
  if (!connectionId) return
  const slot = slots.get(connectionId)
  if (!slot || slot.expiresAtMs <= nowMs || slot.count <= 1) slots.delete(connectionId)
  else slots.set(connectionId, { count: slot.count - 1, expiresAtMs: slot.expiresAtMs })
}

const saturation = new Map()
const saturationKey = (connectionId, windowKey) => `${connectionId}::${windowKey}`

function recordUsage(connectionId, windowKey, usedPct, resetAt, nowMs = Date.now()) {
  if (!connectionId || !windowKey) return
  const key = saturationKey(connectionId, windowKey)
  const parsed = resetAt ? Date.parse(resetAt) : 0
  const resetsAtMs = Number.isFinite(parsed) && parsed > 0 ? parsed : 0
  if ((resetsAtMs > 0 && nowMs >= resetsAtMs) || !(Number.isFinite(usedPct) && usedPct >= SATURATED_AT_PCT)) {
    saturation.delete(key)
    return
  }
  saturation.set(key, { saturated: true, resetsAtMs })
}

function windowSaturated(connectionId, windowKey, nowMs) {
  if (!connectionId || !windowKey) return false
  const key = saturationKey(connectionId, windowKey)
  const entry = saturation.get(key)
  if (!entry) return false
  if (entry.resetsAtMs > 0 && nowMs >= entry.resetsAtMs) {
    saturation.delete(key)
    return false
  }
  return entry.saturated
}

const deficitsByCombo = new Map()

function deficitsOf(comboName) {
  const known = deficitsByCombo.get(comboName)
  if (known) return known
  if (deficitsByCombo.size >= MAX_COMBOS) deficitsByCombo.delete(deficitsByCombo.keys().next().value)
  return deficitsByCombo.set(comboName, new Map()).get(comboName)
}

const weightOf = (weight) => (Number.isFinite(weight) && weight > 0 ? weight : 1)

function notSaturated(targets, modelStr, nowMs) {
  const slash = typeof modelStr === 'string' ? modelStr.indexOf('/') : -1
  const model = typeof modelStr !== 'string' ? '' : slash >= 0 ? modelStr.slice(slash + 1) : modelStr
  const open = targets.filter((target) => {
    const id = target.connectionId ?? ''
    if (id === '') return true
    return !(windowSaturated(id, '5h', nowMs) || windowSaturated(id, '7d', nowMs) || (model !== '' && windowSaturated(id, `7d:${model}`, nowMs)))
  })
  return open.length > 0 ? open : targets
}

function splitByCap(targets, caps, nowMs) {
  if (!caps || caps.size === 0) return { room: targets, full: [] }
  const room = []
  const full = []
  for (const target of targets) {
    const id = target.connectionId ?? ''
    const cap = id ? caps.get(id) : undefined
    const limited = typeof cap === 'number' && Number.isFinite(cap) && cap > 0
    ;(limited && inflightOf(id, nowMs) >= cap ? full : room).push(target)
  }
  return room.length === 0 ? { room: targets, full: [] } : { room, full }
}

function deficitOrder(targets, comboName) {
  if (targets.length <= 1) return targets.slice()
  const deficits = deficitsOf(comboName)
  const total = targets.reduce((sum, target) => sum + weightOf(target.weight), 0)
  for (const target of targets) {
    deficits.set(target.executionKey, (deficits.get(target.executionKey) ?? 0) + weightOf(target.weight) / total)
  }
  let first = targets[0]
  let most = deficits.get(first.executionKey) ?? 0
  for (let i = 1; i < targets.length; i++) {
    const deficit = deficits.get(targets[i].executionKey) ?? 0
    if (deficit > most) {
      most = deficit
      first = targets[i]
    }
  }
  deficits.set(first.executionKey, most - 1)
  return [first, ...targets.filter((target) => target.executionKey !== first.executionKey)]
}

function selectQuotaShareTarget(targets, comboName, modelStr, nowMs = Date.now(), options = undefined) {
  if (targets.length === 0) return { target: null, orderedTargets: [], decrementInflight: () => {} }
  const open = notSaturated(targets, modelStr, nowMs)
  const saturatedTail = targets.filter((target) => !open.includes(target))
  const { room, full } = splitByCap(open, options?.maxConcurrentByConnection, nowMs)
  const ordered = deficitOrder(room, comboName)
  let chosen
  let others
  if (ordered.length >= 2 && inflightOf(ordered[1].connectionId ?? '', nowMs) < inflightOf(ordered[0].connectionId ?? '', nowMs)) {
    chosen = ordered[1]
    others = [ordered[0], ...ordered.slice(2)]
  } else {
    chosen = ordered[0]
    others = ordered.slice(1)
  }
  const connectionId = chosen.connectionId ?? ''
  acquire(connectionId, nowMs)
  const orderedTargets = [chosen, ...others, ...full, ...saturatedTail]
  let done = false
  const decrementInflight = () => {
    if (!done) release(connectionId, nowMs)
    done = true
  }
  return { target: chosen, orderedTargets, decrementInflight }
}

function _clearForBench() {
  for (const map of [slots, saturation, deficitsByCombo]) map.clear()
}

module.exports = { selectQuotaShareTarget, recordUsage, _clearForBench }
