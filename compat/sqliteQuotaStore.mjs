import entry from './sqliteQuotaStore.js'

export const {
  SqliteQuotaStore,
  getSqliteQuotaStore,
} = entry
