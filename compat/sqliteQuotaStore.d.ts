export { SqliteQuotaStore, getSqliteQuotaStore } from '../index'
