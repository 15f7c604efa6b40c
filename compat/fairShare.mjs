import entry from './fairShare.js'

export const {
  decideFairShare,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
