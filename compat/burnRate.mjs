import entry from './burnRate.js'

export const {
  computeBurnRateFromWindow,
  computeBurnRate,
} = entry
