export { enforceQuotaShare, recordConsumption } from '../index'
