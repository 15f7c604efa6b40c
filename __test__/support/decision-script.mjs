// The script an installed copy of the package runs to prove it loads and decides: one
// fair-share decision (a key over its 25 % share of a pool past the threshold blocks) —
// `{ kind: 'block', reason: 'fair-share' }` — in `decision`. Callers append what else they
// print.
export const DECIDE_ONCE = `const q = require('@omniroute/quota-engine')
const key = { poolId: 'p', unit: 'requests', window: 'hourly' }
const decision = q.decideFairShare({
  dimensions: [{ key, limit: 1500, consumedTotal: 900, globalUsedPercent: 0.6 }],
  allocation: { weight: 25, policy: 'hard' },
  consumedByThisKey: { [q.dimensionKeyToString(key)]: 400 },
  saturationThreshold: 0.5,
})
`
