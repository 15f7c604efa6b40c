import entry from './planResolver.js'

export const {
  resolvePlan,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
