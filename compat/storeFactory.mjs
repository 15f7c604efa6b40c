import entry from './storeFactory.js'

export const {
  getQuotaStore,
  getQuotaStoreSync,
  resetQuotaStoreSingleton,
} = entry
