// dimensionKeyToString is declared with the engine's entry, which lib/dimensionKey.js calls
// for every key it has not seen and whose signature it has.
export { dimensionKeyToString } from '../binding'
