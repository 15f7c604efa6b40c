import entry from './sqliteQuotaStore.js'

export const {
  SqliteQuotaStore,
  getSqliteQuotaStore,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
