export { resolvePlan } from '../binding'
export interface RuntimeSignals { headers?: Record<string, string> }
