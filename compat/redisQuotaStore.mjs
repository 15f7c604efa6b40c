import entry from './redisQuotaStore.js'

export const {
  RedisQuotaStore,
  getRedisClient,
  resetRedisClient,
  getRedisQuotaStore,
  resetRedisQuotaStore,
} = entry
