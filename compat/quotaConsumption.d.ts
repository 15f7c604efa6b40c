export { getBucket, incrementBucket, getPair, listConsumptionForPool, sumPoolDimension, gcOlderThan } from '../binding'
export type { ConsumptionRow as ConsumptionEvent } from '../binding'
