import entry from './planRegistry.js'

export const {
  getKnownPlan,
  knownProviders,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
