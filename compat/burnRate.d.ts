export { computeBurnRateFromWindow, computeBurnRate } from '../binding'
export type { BurnRate as BurnRateResult } from '../binding'
export interface BurnRateSample { ts: number; consumed: number }
