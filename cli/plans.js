'use strict'
// `quota-engine plans`: the plan `resolvePlan` gives each connection (docs/contract.md §6) and
// where it came from — a stored `provider_plans` row, the catalog, or none.
const db = require('./database.js')
const { formatDimension, table } = require('./format.js')

/**
 * Every connection the database knows (plan rows, pool members, the host's
 * `provider_connections`), or only `connectionIds`, with its resolved plan.
 */
function collectPlans({ inspection, connectionIds = [], provider }) {
  const providers = db.providersOf(inspection)
  const planRows = new Map(inspection.planRows.map((row) => [row.connectionId, row]))
  const pools = db.allPools()
  const poolsOf = new Map()
  for (const pool of pools) {
    for (const id of pool.connectionIds) poolsOf.set(id, [...(poolsOf.get(id) || []), pool.id])
  }
  let ids
  if (connectionIds.length > 0) ids = connectionIds
  else {
    ids = [...new Set([...planRows.keys(), ...poolsOf.keys(), ...(inspection.hostConnections || []).map((c) => c.id)])]
    ids.sort()
  }
  return ids.map((connectionId) => {
    const knownProvider = providers.get(connectionId) ?? provider ?? null
    const { plan, origin } = db.resolvedPlan(connectionId, knownProvider)
    const row = planRows.get(connectionId)
    const notes = []
    if (row && row.dimensionCount === 0) notes.push('its provider_plans row has no dimensions, so it is ignored')
    if (!knownProvider) notes.push('provider unknown (no provider_plans row, no provider_connections row; give --provider)')
    if (plan.dimensions.some((d) => d.limit <= Number.EPSILON)) notes.push('ε limits are unknown: not enforced until configured')
    return {
      connectionId,
      provider: knownProvider,
      origin,
      source: plan.source,
      dimensions: plan.dimensions,
      pools: poolsOf.get(connectionId) || [],
      notes,
    }
  })
}

const ORIGIN_TEXT = { stored: 'stored row', catalog: 'catalog', none: 'none' }

/** The `plans` command. */
function plansCommand(connectionIds, options, dbOption) {
  const database = db.resolveDatabase(dbOption)
  db.openEngine(database)
  const inspection = db.inspect(database)
  const plans = collectPlans({ inspection, connectionIds, provider: options.provider })
  if (options.json) {
    process.stdout.write(`${JSON.stringify({ database: database.path, plans }, null, 2)}\n`)
    return 0
  }
  const out = [`Database ${database.path}`, '']
  if (plans.length === 0) {
    out.push('No connections: no provider_plans rows, no pools and no provider_connections table rows.')
  } else {
    const rows = plans.map((p) => [
      p.connectionId,
      p.provider ?? '?',
      p.origin === 'stored' ? `${ORIGIN_TEXT.stored} (${p.source})` : ORIGIN_TEXT[p.origin],
      p.dimensions.length ? p.dimensions.map(formatDimension).join(' · ') : '— (not limited)',
      p.pools.join(', ') || '—',
    ])
    out.push(
      ...table(
        [{ title: 'connection' }, { title: 'provider' }, { title: 'from' }, { title: 'dimensions' }, { title: 'pools' }],
        rows,
      ),
    )
    const notes = plans.flatMap((p) => p.notes.map((n) => `  ${p.connectionId}: ${n}`))
    if (notes.length) out.push('', 'Notes:', ...notes)
  }
  process.stdout.write(`${out.join('\n')}\n`)
  return 0
}

module.exports = { plansCommand, collectPlans }
