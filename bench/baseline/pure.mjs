// The other pure calls in plain JavaScript, as the host's TypeScript modules wrote them (the
// rules of docs/contract.md §1, §6, §9), for bench/pure.mjs to compare the engine with. The
// plan catalog's data is the engine's, read once: only the lookup is measured.
const UNITS = new Set(['percent', 'requests', 'tokens', 'usd'])
const WINDOWS = new Set(['5h', 'hourly', 'daily', 'weekly', 'monthly'])

export function dimensionKeyToString(key) {
  if (typeof key !== 'object' || key === null) throw new TypeError('key: expected an object')
  const { poolId, unit, window } = key
  if (typeof poolId !== 'string') throw new TypeError('key.poolId: expected a string')
  if (!UNITS.has(unit)) throw new RangeError('key.unit: unknown unit')
  if (!WINDOWS.has(window)) throw new RangeError('key.window: unknown window')
  return `${poolId}:${unit}:${window}`
}

function burnRate(rate, remaining) {
  // biome-ignore lint/complexity/useMathMinMax: NaN gives 0 here, as in the engine
  const tokensPerSecond = rate > 0 ? rate : 0
  let timeToExhaustionMs = null
  if (tokensPerSecond > 0 && typeof remaining === 'number' && remaining >= 0) {
    const ms = (remaining / tokensPerSecond) * 1000
    if (Number.isFinite(ms)) timeToExhaustionMs = ms
  }
  return { tokensPerSecond, timeToExhaustionMs }
}

export function computeBurnRate(history, remaining) {
  if (!Array.isArray(history)) throw new TypeError('history: expected an array')
  let lastTs, lastConsumed, ema
  let have = false
  for (let i = 0; i < history.length; i++) {
    const { ts, consumed } = history[i]
    if (typeof ts !== 'number' || typeof consumed !== 'number') throw new TypeError(`history[${i}]: expected numbers`)
    if (!Number.isFinite(ts) || !Number.isFinite(consumed)) continue
    if (have) {
      if (ts <= lastTs) continue
      const rate = (consumed - lastConsumed) / ((ts - lastTs) / 1000)
      ema = ema === undefined ? rate : 0.3 * rate + 0.7 * ema
    }
    lastTs = ts
    lastConsumed = consumed
    have = true
  }
  return ema === undefined ? { tokensPerSecond: 0, timeToExhaustionMs: null } : burnRate(ema, remaining)
}

export function computeBurnRateFromWindow(consumedTotal, windowMs, remaining) {
  if (typeof consumedTotal !== 'number') throw new TypeError('consumedTotal: expected a number')
  if (typeof windowMs !== 'number' || !(Number.isFinite(windowMs) && windowMs >= 1)) throw new RangeError('windowMs: must be a finite number >= 1')
  const window = Math.trunc(windowMs)
  if (!Number.isFinite(consumedTotal) || consumedTotal <= 0) return { tokensPerSecond: 0, timeToExhaustionMs: null }
  const now = Date.now()
  const elapsedMs = Math.max(1, ((now % window) + window) % window)
  return burnRate(consumedTotal / (elapsedMs / 1000), remaining)
}

/** The catalog lookups over `catalog` (provider → plan), as plain JS would hold it. */
export function planRegistry(catalog) {
  const plans = new Map(catalog.map((plan) => [plan.provider, plan]))
  const names = catalog.map((plan) => plan.provider)
  return {
    getKnownPlan(provider) {
      if (typeof provider !== 'string') throw new TypeError('provider: expected a string')
      const plan = plans.get(provider)
      return plan ? { provider: plan.provider, dimensions: plan.dimensions.map((d) => ({ unit: d.unit, window: d.window, limit: d.limit })) } : null
    },
    knownProviders: () => names.slice(),
  }
}
