// ES module entry: the same exports as index.js,
// re-exported by name so that `import { decideFairShare } from '@omniroute/quota-engine'`
// works for every export, including WINDOW_MS, which the native module defines itself.
import native from './index.js'

export const {
  WINDOW_MS,
  computeBurnRate,
  computeBurnRateFromWindow,
  decideFairShare,
  dimensionKeyToString,
  getKnownPlan,
  knownProviders,
} = native
