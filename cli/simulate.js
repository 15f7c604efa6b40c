'use strict'
// `quota-engine simulate`: three API keys share one plan from the catalog on a simulated
// clock; one key bursts. Every call goes through the real hot path — the native
// `enforceStep` / `recordStep` with an injected `nowMs` — on a temporary SQLite file, so
// the run shows what the engine itself decides, an hour (or a month) in well under a
// second.
//
// Saturation. The hot path asks the host's saturation fetcher how full the upstream is
// (docs/contract.md §8) and is strict only at or above the threshold (§3 rule 6). Here a fetcher
// plays the upstream, answering on the simulated clock (its answers are cached 30 s of
// simulated time, as in production):
// - requests / tokens / usd plans: the upstream has seen what the pool consumed, so it
//   reports pool total ÷ limit;
// - percent plans (codex, claude, bailian): the upstream has a capacity of `--calls`
//   calls per window and reports the share used. Percent dimensions have no per-key
//   counters (the upstream reports only a percentage, and recordConsumption adds nothing
//   for percent, §7), so the only block there is `global-saturated` at 100 %: the run
//   shows that per-key shares need a requests or tokens dimension in the plan.
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const native = require('../lib/native.js')
const { StoreDriver } = require('../lib/stores.js')
const sqliteDriver = new StoreDriver()
const host = require('../lib/host.js')

const { WINDOW_MS } = native
const EPSILON = Number.EPSILON
const CONNECTION = 'sim-connection'
const POOL_NAME = 'simulation'
const BLOCK_REASONS = ['fair-share', 'global-saturated', 'cap-absolute', 'model-cap']

/** A small seeded PRNG (mulberry32): the same seed gives the same run. */
function prng(seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** The two-bucket sliding window of docs/contract.md §2, for the simulated upstream. */
class SlidingCounter {
  constructor(windowMs) {
    this.windowMs = windowMs
    this.bucket = null
    this.curr = 0
    this.prev = 0
  }

  roll(now) {
    const bucket = Math.floor(now / this.windowMs)
    if (this.bucket === null) this.bucket = bucket
    if (bucket === this.bucket + 1) {
      this.prev = this.curr
      this.curr = 0
    } else if (bucket > this.bucket + 1) {
      this.prev = 0
      this.curr = 0
    }
    this.bucket = bucket
  }

  add(amount, now) {
    this.roll(now)
    this.curr += amount
  }

  value(now) {
    this.roll(now)
    const elapsed = now - this.bucket * this.windowMs
    return this.prev * (1 - elapsed / this.windowMs) + this.curr
  }
}

/** The plan to simulate: the catalog's, with `--limit` applied to the charted dimension. */
function simulationPlan(provider, limitOverride) {
  const known = native.getKnownPlan(provider)
  if (!known) {
    throw new RangeError(`no catalog plan for ${JSON.stringify(provider)}; known: ${native.knownProviders().join(', ')}`)
  }
  if (known.dimensions.length === 0) {
    throw new RangeError(`the catalog plan of ${provider} has no dimensions: nothing to share`)
  }
  const dimensions = known.dimensions.map((d) => ({ ...d }))
  const shortest = (dims) => dims.reduce((best, d) => (WINDOW_MS[d.window] < WINDOW_MS[best.window] ? d : best))
  let overridden = false
  if (limitOverride !== undefined) {
    const unknown = dimensions.filter((d) => d.limit <= EPSILON)
    const target = shortest(unknown.length ? unknown : dimensions)
    target.limit = limitOverride
    overridden = true
  }
  const enforced = dimensions.filter((d) => d.limit > EPSILON)
  if (enforced.length === 0) {
    const d = shortest(dimensions)
    throw new RangeError(
      `the catalog has no limits for ${provider} (ε: "configure manually"); pass --limit <n> for its ${d.unit}/${d.window} dimension`,
    )
  }
  return { dimensions, enforced, chart: shortest(enforced), overridden }
}

/** Per-call cost in each unit: the pool's charted window fills after `calls` admitted calls. */
function callCosts(enforced, chart, calls) {
  const costs = { tokens: 0, usd: 0, requests: 1 }
  for (const unit of ['requests', 'tokens', 'usd']) {
    const dims = enforced.filter((d) => d.unit === unit)
    if (dims.length === 0) continue
    const dim = dims.reduce((best, d) => (WINDOW_MS[d.window] < WINDOW_MS[best.window] ? d : best))
    const scale = WINDOW_MS[chart.window] / WINDOW_MS[dim.window]
    const cost = (dim.limit * scale) / calls
    costs[unit] = unit === 'requests' ? Math.max(1, Math.round(cost)) : cost
  }
  return costs
}

/** Arrival times (ms from the start) of a Poisson process with piecewise-constant rates. */
function arrivals(segments, random) {
  const times = []
  for (const { from, to, perMs } of segments) {
    if (perMs <= 0) continue
    let t = from
    for (;;) {
      t += -Math.log(1 - random()) / perMs
      if (t >= to) break
      times.push(t)
    }
  }
  return times
}

const count = (n) => n.toLocaleString('en-US')

/** What the run shows, in a few sentences computed from its counts. */
function describeOutcome(keys, policy) {
  const steady = keys.filter((k) => k.role === 'steady')
  const burst = keys.find((k) => k.role === 'burst')
  const sentences = []
  const steadyBlocked = steady.reduce((n, k) => n + k.blockedTotal, 0)
  const steadyAttempted = steady.reduce((n, k) => n + k.attempted, 0)
  sentences.push(
    steadyBlocked === 0
      ? 'The steady keys got every call they made'
      : `The steady keys had ${count(steadyBlocked)} of ${count(steadyAttempted)} calls blocked`,
  )
  if (burst.blocked['fair-share'] > 0) {
    sentences.push(
      `The burst key borrowed idle share while the pool was below the threshold; in strict mode its calls over its fair share were blocked (${count(burst.blocked['fair-share'])})`,
    )
  }
  const saturated = keys.reduce((n, k) => n + k.blocked['global-saturated'], 0)
  if (saturated > 0) sentences.push(`The pool reached its limit: ${count(saturated)} calls were blocked as global-saturated`)
  if (policy === 'soft') {
    sentences.push(`Policy soft only deprioritizes a key over its fair share (${count(burst.deprioritized)} burst calls); it never blocks for it`)
  } else if (policy === 'burst') {
    sentences.push('Policy burst never holds a key to its fair share')
  }
  return sentences
}

/**
 * Runs the simulation. Options: `provider` (default kimi), `windows` (1), `threshold`
 * (QUOTA_SATURATION_THRESHOLD, 0.5), `policy` (hard), `limit`, `calls` (1500), `steady`
 * (0.8: each steady key asks for this share of its fair share), `burst` (4: the burst
 * key's rate, in pools per window), `burstAt` (0.15 of the first window), `seed` (1),
 * `points` (240 chart samples), `onProgress(fraction)`.
 */
/** A numeric setting's value in effect (the engine reads and validates the environment). */
function setting(name) {
  return native.describeSettings().find((s) => s.name === name).value
}

function runSimulation(options = {}) {
  const provider = options.provider || 'kimi'
  const windows = options.windows ?? 1
  const threshold = options.threshold ?? setting('QUOTA_SATURATION_THRESHOLD')
  const savedThreshold = process.env.QUOTA_SATURATION_THRESHOLD
  const policy = options.policy || 'hard'
  const calls = options.calls ?? 1500
  const steady = options.steady ?? 0.8
  const burst = options.burst ?? 4
  const burstAt = options.burstAt ?? 0.15
  const points = options.points ?? 240
  const random = prng(options.seed ?? 1)
  const onProgress = options.onProgress || (() => {})

  const plan = simulationPlan(provider, options.limit)
  const { chart } = plan
  const windowMs = WINDOW_MS[chart.window]
  const durationMs = windows * windowMs
  const percent = chart.unit === 'percent'
  const costs = callCosts(plan.enforced, chart, calls)
  const chartCost = percent ? 100 / calls : costs[chart.unit]
  const poolCalls = chart.limit / chartCost

  const keys = [
    { id: 'key-1', label: 'key-1 (steady)', role: 'steady' },
    { id: 'key-2', label: 'key-2 (steady)', role: 'steady' },
    { id: 'key-3', label: 'key-3 (burst)', role: 'burst' },
  ]
  const weight = 100 / keys.length
  const fairShare = (weight / 100) * chart.limit
  const fairCalls = poolCalls / keys.length

  // Start on a bucket boundary of the charted window, in the future, so the retention
  // sweep (which deletes rows older than 14 days) never touches the run's rows.
  const t0 = Math.ceil(Date.now() / windowMs) * windowMs
  const schedule = []
  keys.forEach((key, index) => {
    const segments =
      key.role === 'steady'
        ? [{ from: 0, to: durationMs, perMs: (steady * fairCalls) / windowMs }]
        : [
            { from: 0, to: burstAt * windowMs, perMs: (0.2 * fairCalls) / windowMs },
            { from: burstAt * windowMs, to: durationMs, perMs: (burst * poolCalls) / windowMs },
          ]
    for (const t of arrivals(segments, random)) schedule.push({ t, index })
  })
  schedule.sort((a, b) => a.t - b.t)

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quota-engine-sim-'))
  const stats = keys.map(() => ({ attempted: 0, admitted: 0, deprioritized: 0, used: 0, blocked: Object.fromEntries(BLOCK_REASONS.map((r) => [r, 0])) }))
  const series = {
    t: [],
    keys: keys.map(() => []),
    pool: [],
    saturation: [],
    strict: [],
    blocked: keys.map(() => []),
    attempted: keys.map(() => []),
  }
  const upstream = new Map(plan.enforced.filter((d) => d.unit === 'percent').map((d) => [d.window, new SlidingCounter(WINDOW_MS[d.window])]))
  const perKeyPercent = keys.map(() => new SlidingCounter(windowMs))
  const interval = keys.map(() => ({ blocked: 0, attempted: 0 }))
  const chartKey = { poolId: '', unit: chart.unit, window: chart.window }

  function saturationOf(unit, window, now) {
    if (unit === 'percent') {
      const capacity = (calls * WINDOW_MS[window]) / windowMs
      const counter = upstream.get(window)
      return counter ? Math.min(counter.value(now) / capacity, 1) : 0
    }
    const dim = plan.enforced.find((d) => d.unit === unit && d.window === window)
    if (!dim) return 0
    const total = sqliteDriver.poolConsumedTotal({ poolId: chartKey.poolId, unit, window }, now)
    return Math.min(Math.max(total / dim.limit, 0), 1)
  }

  // The crossing answers an allow with a number (0 not enforced, 1 allow, 2 deprioritized).
  const enforceStep = (key, now) => {
    const result = native.enforce(key.id, CONNECTION, provider, null, undefined, undefined, undefined, undefined, now)
    if (typeof result === 'number') return result === 0 ? { kind: 'allow' } : { kind: 'allow', deprioritize: result === 2 }
    if (result.logs) host.forwardLogs(result.logs)
    // An entry served past its 30 s (stale-while-revalidate, docs/contract.md §8): its
    // background refresh lands at once on the simulated clock.
    if (result.refresh) {
      for (const [p, c, unit, window] of result.refresh) native.putSaturation(p, c, unit, window, saturationOf(unit, window, now), now)
    }
    return result
  }

  function step(key, now) {
    let result = enforceStep(key, now)
    if (result.kind === 'fetch') {
      for (const [unit, window] of result.fetch) {
        native.putSaturation(provider, CONNECTION, unit, window, saturationOf(unit, window, now), now)
      }
      result = enforceStep(key, now)
    }
    if (result.kind === 'error') throw new Error(`enforceStep failed: ${result.reason}`)
    return result
  }

  function attempt(index, now) {
    const key = keys[index]
    const s = stats[index]
    s.attempted++
    interval[index].attempted++
    const result = step(key, now)
    if (result.kind === 'block') {
      s.blocked[result.code] = (s.blocked[result.code] || 0) + 1
      interval[index].blocked++
      return
    }
    s.admitted++
    s.used += chartCost
    if (result.deprioritize) s.deprioritized++
    native.record(key.id, CONNECTION, provider, null, costs.tokens, costs.usd, costs.requests, undefined, now)
    for (const counter of upstream.values()) counter.add(1, now)
    perKeyPercent[index].add(chartCost, now)
  }

  function sample(offset) {
    const now = t0 + offset
    series.t.push(offset)
    keys.forEach((key, i) => {
      const use = percent ? perKeyPercent[i].value(now) : sqliteDriver.peek(key.id, chartKey, now)
      series.keys[i].push(use)
      series.blocked[i].push(interval[i].blocked)
      series.attempted[i].push(interval[i].attempted)
      interval[i].blocked = 0
      interval[i].attempted = 0
    })
    const saturation = saturationOf(chart.unit, chart.window, now)
    series.pool.push(percent ? saturation * 100 : sqliteDriver.poolConsumedTotal(chartKey, now))
    series.saturation.push(saturation)
    series.strict.push(saturation >= threshold)
  }

  const previousFetchers = new Map(host.state.fetchers)
  try {
    native.configureDbPath(path.join(dir, 'storage.sqlite'))
    native.closeQuotaDb()
    // The engine reads the threshold from the environment: the simulation's, for its run.
    process.env.QUOTA_SATURATION_THRESHOLD = String(threshold)
    // The simulated upstream is this provider's saturation fetcher; the loop below answers
    // the hot path's `fetch` steps with it on the simulated clock.
    host.registerSaturationFetcher(provider, async (_connectionId, dim) => saturationOf(dim.unit, dim.window, Date.now()))
    if (plan.overridden) {
      native.upsertProviderPlan({ connectionId: CONNECTION, provider, dimensions: plan.dimensions, source: 'manual' })
    }
    const pool = native.createPool({
      connectionId: CONNECTION,
      name: POOL_NAME,
      allocations: keys.map((k) => ({ apiKeyId: k.id, weight, policy })),
    })
    chartKey.poolId = pool.id

    const sampleEvery = durationMs / points
    let nextSample = 0
    const progressEvery = Math.max(1, Math.floor(schedule.length / 200))
    sample(0)
    nextSample = sampleEvery
    schedule.forEach(({ t, index }, n) => {
      while (nextSample <= t) {
        sample(nextSample)
        nextSample += sampleEvery
      }
      attempt(index, t0 + t)
      if (n % progressEvery === 0) onProgress(t / durationMs)
    })
    while (series.t.length <= points) {
      sample(Math.min(nextSample, durationMs))
      nextSample += sampleEvery
    }
    onProgress(1)
  } finally {
    host.state.fetchers.clear()
    for (const [name, fetcher] of previousFetchers) host.state.fetchers.set(name, fetcher)
    native.setSaturationFetchers('host', [...host.state.fetchers.keys()])
    native.closeQuotaDb()
    native.configureDbPath(undefined)
    if (savedThreshold === undefined) delete process.env.QUOTA_SATURATION_THRESHOLD
    else process.env.QUOTA_SATURATION_THRESHOLD = savedThreshold
    fs.rmSync(dir, { recursive: true, force: true })
  }

  const totalUsed = stats.reduce((sum, s) => sum + s.used, 0)
  const summaryKeys = keys.map((key, i) => ({
    ...key,
    weight,
    attempted: stats[i].attempted,
    admitted: stats[i].admitted,
    blocked: stats[i].blocked,
    blockedTotal: Object.values(stats[i].blocked).reduce((a, b) => a + b, 0),
    deprioritized: stats[i].deprioritized,
    used: stats[i].used,
    share: totalUsed > 0 ? stats[i].used / totalUsed : 0,
    endUse: series.keys[i][series.keys[i].length - 1],
  }))
  const notes = []
  if (percent) {
    notes.push(
      'Percent plans have no per-key counters (the upstream reports only a percentage), so the engine can only stop every key at 100 %: add a requests or tokens dimension to the plan (a provider_plans row) to protect each key’s share',
    )
  }
  return {
    provider,
    plan: { dimensions: plan.dimensions, origin: plan.overridden ? 'stored row (--limit)' : 'catalog' },
    chart: { unit: chart.unit, window: chart.window, limit: chart.limit, windowMs },
    threshold,
    policy,
    windows,
    durationMs,
    calls,
    costs,
    chartCost,
    fairShare,
    strictAt: threshold * chart.limit,
    burstAtMs: burstAt * windowMs,
    keys: summaryKeys,
    outcome: describeOutcome(summaryKeys, policy),
    poolEnd: series.pool[series.pool.length - 1],
    series,
    notes,
  }
}

module.exports = { runSimulation, describeOutcome, SlidingCounter, simulationPlan, callCosts, prng }
