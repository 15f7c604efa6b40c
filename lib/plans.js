'use strict'
// The plan catalog (docs/contract.md §6) at the cost of a lookup in plain JavaScript: the
// catalog is the engine's and constant for the process, so each provider's answer is asked
// of the engine once and remembered; every call still gets objects of its own (a caller
// that changes one changes nothing for the next). Only strings are remembered — anything
// else goes to the engine, which throws its TypeError — and at most MAX_PROVIDERS of them.
const native = require('./native.js')

const MAX_PROVIDERS = 4096
const plans = new Map()
let providers = null

// A plan of the catalog is { provider, dimensions: [{ unit, window, limit }] } (index.d.ts,
// KnownPlan): copied field by field, which V8 makes several times faster than a spread.
const copyDimension = ({ unit, window, limit }) => ({ unit, window, limit })
const copy = (plan) => plan && { provider: plan.provider, dimensions: plan.dimensions.map(copyDimension) }

/** The catalog's plan for `provider`, or `null`. */
function getKnownPlan(provider) {
  if (typeof provider !== 'string') return native.getKnownPlan(provider)
  let plan = plans.get(provider)
  if (plan === undefined) {
    plan = native.getKnownPlan(provider)
    if (plans.size >= MAX_PROVIDERS) plans.clear()
    plans.set(provider, plan)
  }
  return copy(plan)
}

/** Every provider of the catalog, in catalog order. */
function knownProviders() {
  providers ??= native.knownProviders()
  return providers.slice()
}

module.exports = { getKnownPlan, knownProviders }
