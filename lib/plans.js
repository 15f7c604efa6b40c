'use strict'
// The plan catalog (docs/contract.md §6) at the cost of a lookup in plain JavaScript: the
// catalog is the engine's and constant for the process, so it is asked of the engine once,
// at the first call; every call still gets objects of its own (a caller that changes one
// changes nothing for the next). Anything but a string goes to the engine, which throws its
// TypeError.
const native = require('./native.js')

let catalog = null
let providers = null

// A plan of the catalog is { provider, dimensions: [{ unit, window, limit }] } (index.d.ts,
// KnownPlan): copied field by field, which V8 makes several times faster than a spread.
const copyDimension = ({ unit, window, limit }) => ({ unit, window, limit })
const copy = (plan) => ({ provider: plan.provider, dimensions: plan.dimensions.map(copyDimension) })

/** Every provider of the catalog, in catalog order. */
function knownProviders() {
  providers ??= native.knownProviders()
  return providers.slice()
}

/** The catalog's plan for `provider`, or `null`. */
function getKnownPlan(provider) {
  if (typeof provider !== 'string') return native.getKnownPlan(provider)
  catalog ??= new Map(knownProviders().map((name) => [name, native.getKnownPlan(name)]))
  const plan = catalog.get(provider)
  return plan === undefined ? null : copy(plan)
}

module.exports = { getKnownPlan, knownProviders }
