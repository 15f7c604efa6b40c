export { getKnownPlan, knownProviders } from '../lib/plans'
