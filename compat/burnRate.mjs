import entry from './burnRate.js'

export const {
  computeBurnRateFromWindow,
  computeBurnRate,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
