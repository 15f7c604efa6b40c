export { computeBurnRateFromWindow, computeBurnRate } from '../binding'
