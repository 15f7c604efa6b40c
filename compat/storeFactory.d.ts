export { getQuotaStore, getQuotaStoreSync, resetQuotaStoreSingleton } from '../index'
