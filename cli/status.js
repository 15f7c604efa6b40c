'use strict'
// `quota-engine status`: each pool's plan dimensions and every key's use, fair share,
// deficit and borrowing — the PoolUsageSnapshot the dashboard shows (docs/contract.md §4), with
// the limits the hot path enforces (plan limit × member connections, docs/contract.md §7 step 4).
const native = require('../lib/native.js')
const { StoreDriver } = require('../lib/stores.js')
const sqliteDriver = new StoreDriver()
const { WINDOW_MS } = native
const db = require('./database.js')
const { EPSILON, formatNumber, formatPercent, formatLimit, table } = require('./format.js')

/** The status of every pool (or of `poolId`) at `nowMs`, as plain data. */
function collectStatus({ poolId, nowMs = Date.now(), inspection }) {
  const providers = db.providersOf(inspection)
  let pools = db.allPools()
  if (poolId !== undefined) {
    pools = pools.filter((p) => p.id === poolId)
    if (pools.length === 0) throw new db.CliError(`no pool with id ${JSON.stringify(poolId)}`, 1)
  }
  return pools.map((pool) => {
    const provider = providers.get(pool.connectionId) ?? null
    const { plan, origin } = db.resolvedPlan(pool.connectionId, provider)
    const members = Math.max(pool.connectionIds.length, 1)
    const enforced = plan.dimensions.filter((d) => d.limit > EPSILON && WINDOW_MS[d.window] !== undefined)
    const unconfigured = plan.dimensions.filter((d) => d.limit <= EPSILON)
    const snapshot = sqliteDriver.poolUsage(
      pool.id,
      enforced.map((d) => ({ unit: d.unit, window: d.window, limit: d.limit * members })),
      nowMs,
    )
    const allocations = new Map(pool.allocations.map((a) => [a.apiKeyId, a]))
    const dimensions = snapshot.dimensions.map((dim, i) => ({
      unit: dim.unit,
      window: dim.window,
      planLimit: enforced[i].limit,
      connections: members,
      limit: dim.limit,
      consumedTotal: dim.consumedTotal,
      usedFraction: dim.limit > 0 ? dim.consumedTotal / dim.limit : 0,
      keys: dim.perKey.map((k) => {
        const a = allocations.get(k.apiKeyId)
        const key = { ...k, weight: a ? a.weight : null, policy: a ? a.policy : null }
        if (a && a.capValue !== undefined) {
          key.capValue = a.capValue
          key.capUnit = a.capUnit
        }
        return key
      }),
    }))
    const out = {
      id: pool.id,
      name: pool.name,
      groupId: pool.groupId,
      connectionIds: pool.connectionIds,
      plan: { provider: provider ?? plan.provider, origin, source: plan.source, dimensions: plan.dimensions },
      unconfiguredDimensions: unconfigured,
      allocations: pool.allocations,
      dimensions,
      generatedAt: snapshot.generatedAt,
    }
    if (snapshot.burnRate) out.burnRate = snapshot.burnRate
    return out
  })
}

const ORIGIN_TEXT = {
  stored: (p) => `stored row (${p.source})`,
  catalog: () => 'catalog',
  none: () => 'none',
}

function renderPool(pool) {
  const lines = []
  lines.push(`Pool ${pool.id}  "${pool.name}"  (group ${pool.groupId})`)
  const [primary, ...others] = pool.connectionIds
  lines.push(`  connections  ${[`${primary} (primary)`, ...others].join(', ')}`)
  const provider = pool.plan.provider || 'unknown provider'
  lines.push(`  plan         ${provider} · ${ORIGIN_TEXT[pool.plan.origin](pool.plan)}`)
  if (pool.plan.origin === 'none') {
    lines.push(
      pool.plan.provider
        ? '               no dimensions: requests on this pool are not limited'
        : '               provider unknown (no provider_plans row and no provider_connections row): not limited',
    )
  }
  for (const dim of pool.unconfiguredDimensions) {
    lines.push(`  ${dim.unit}/${dim.window}: limit ${formatLimit(dim.limit)} — not enforced until configured`)
  }
  if (pool.allocations.length === 0) lines.push('  no API keys allocated')
  for (const dim of pool.dimensions) {
    const scaled = dim.connections > 1 ? ` (${formatNumber(dim.planLimit)} × ${dim.connections} connections)` : ''
    lines.push('')
    lines.push(
      `  ${dim.unit}/${dim.window}  limit ${formatNumber(dim.limit)}${scaled}  ·  used ${formatNumber(dim.consumedTotal)} (${formatPercent(dim.usedFraction)})`,
    )
    const rows = dim.keys.map((k) => [
      k.apiKeyId,
      k.weight === null ? '—' : formatNumber(k.weight),
      k.policy ?? '—',
      k.capValue === undefined ? '—' : `${formatNumber(k.capValue)} ${k.capUnit}`,
      formatNumber(k.consumed),
      formatNumber(k.fairShare),
      formatNumber(k.deficit),
      k.borrowing ? 'yes' : 'no',
    ])
    lines.push(
      ...table(
        [
          { title: 'API key' },
          { title: 'weight', align: 'right' },
          { title: 'policy' },
          { title: 'cap' },
          { title: 'consumed', align: 'right' },
          { title: 'fair share', align: 'right' },
          { title: 'deficit', align: 'right' },
          { title: 'borrowing' },
        ],
        rows,
        { indent: '    ' },
      ),
    )
  }
  if (pool.burnRate) {
    const tte = pool.burnRate.timeToExhaustionMs
    lines.push('')
    lines.push(
      `  burn rate    ${formatNumber(pool.burnRate.tokensPerSecond)} tokens/s` +
        (tte === null ? '' : ` · exhausted in ${formatNumber(tte / 60_000, 1)} min at this rate`),
    )
  }
  return lines.join('\n')
}

/** The `status` command. */
function statusCommand(options, dbOption) {
  const database = db.resolveDatabase(dbOption)
  db.openEngine(database)
  const inspection = db.inspect(database)
  const nowMs = Date.now()
  const pools = collectStatus({ poolId: options.pool, nowMs, inspection })
  if (options.json) {
    process.stdout.write(`${JSON.stringify({ database: database.path, generatedAt: new Date(nowMs).toISOString(), pools }, null, 2)}\n`)
    return 0
  }
  const out = [`Database ${database.path}`, '']
  if (pools.length === 0) out.push('No quota pools.')
  out.push(pools.map(renderPool).join('\n\n'))
  process.stdout.write(`${out.join('\n')}\n`)
  return 0
}

module.exports = { statusCommand, collectStatus }
