// Declared with the engine's entries, which lib/plans.js asks once per provider and whose
// signatures it has.
export { getKnownPlan, knownProviders } from '../binding'
