export { selectQuotaShareTarget } from '../lib/quotaShareStrategy'
export { _clearDrrStateForTest, _getDrrDeficitForTest } from '../binding'
