export { getKnownPlan, knownProviders } from '../index'
