export { computeBurnRateFromWindow, computeBurnRate } from '../lib/burnRate'
