// The baseline of bench/pure.mjs: the fair-share rule (docs/contract.md §3) written plainly in
// JavaScript, the way the host's TypeScript engine decided it. Benchmark reference only — the
// package decides with the engine's one implementation (src/core/fair_share.rs).
const WINDOW_MS = { '5h': 5 * 3_600_000, hourly: 3_600_000, daily: 86_400_000, weekly: 7 * 86_400_000, monthly: 30 * 86_400_000 }

function retryAfter(prev, curr, threshold, nowMs, windowMs) {
  if (!(prev > 0) || curr >= threshold || !Number.isFinite(prev + curr + threshold)) return undefined
  const elapsed = ((nowMs % windowMs) + windowMs) % windowMs
  const t = Math.floor(windowMs * (1 - (threshold - curr) / prev) - elapsed) + 1
  return Math.min(Math.max(t, 1), windowMs - elapsed)
}

export function decideFairShare({ dimensions, allocation, consumedByThisKey, saturationThreshold }) {
  let penalized = false
  for (const dim of dimensions) {
    const { key, limit } = dim
    const consumed = (consumedByThisKey && consumedByThisKey[`${key.poolId}:${key.unit}:${key.window}`]) ?? 0
    const fairShare = (allocation.weight / 100) * limit
    const block = (reason, prev, curr, threshold) => {
      const b = dim.buckets
      const retryAfterMs = b ? retryAfter(b[prev], b[curr], threshold, b.nowMs, WINDOW_MS[key.window]) : undefined
      return retryAfterMs === undefined ? { kind: 'block', reason } : { kind: 'block', reason, retryAfterMs }
    }
    if (allocation.capValue != null && allocation.capUnit === key.unit && consumed >= allocation.capValue) return block('cap-absolute', 'keyPrev', 'keyCurr', allocation.capValue)
    if (dim.consumedTotal >= limit) return block('global-saturated', 'poolPrev', 'poolCurr', limit)
    const strict = dim.globalUsedPercent >= saturationThreshold
    const policy = allocation.policy === 'soft' || allocation.policy === 'burst' ? allocation.policy : 'hard'
    if (policy === 'hard') {
      if (strict && consumed >= fairShare) return block('fair-share', 'keyPrev', 'keyCurr', fairShare)
      if (!strict && consumed >= limit) return block('global-saturated', 'keyPrev', 'keyCurr', limit)
    } else if (policy === 'soft' && consumed >= fairShare) {
      penalized = true
    }
  }
  return penalized ? { kind: 'allow', reason: 'ok', penalized: true } : { kind: 'allow', reason: 'ok' }
}
