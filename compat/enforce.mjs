import entry from './enforce.js'

export const {
  enforceQuotaShare,
  recordConsumption,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
