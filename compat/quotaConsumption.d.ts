export { getBucket, incrementBucket, getPair, listConsumptionForPool, sumPoolDimension, gcOlderThan } from '../binding'
