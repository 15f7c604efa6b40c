import entry from './storeFactory.js'

export const {
  getQuotaStore,
  getQuotaStoreSync,
  resetQuotaStoreSingleton,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
