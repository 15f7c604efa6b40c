// Declared with the engine's checked entries, which lib/burnRate.js falls back to and whose
// signatures it has.
export { computeBurnRate, computeBurnRateFromWindow } from '../binding'
