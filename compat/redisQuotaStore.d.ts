export { RedisQuotaStore, getRedisClient, resetRedisClient, getRedisQuotaStore, resetRedisQuotaStore } from '../index'
