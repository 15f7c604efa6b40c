import entry from './redisQuotaStore.js'

export const {
  RedisQuotaStore,
  getRedisClient,
  resetRedisClient,
  getRedisQuotaStore,
  resetRedisQuotaStore,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
