export { computeBurnRateFromWindow, computeBurnRate } from '../index'
