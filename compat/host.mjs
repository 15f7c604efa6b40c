import entry from './host.js'

export const {
  installHost,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
