export { resolvePlan } from '../binding'
