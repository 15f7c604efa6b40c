export { getKnownPlan, knownProviders } from '../binding'
