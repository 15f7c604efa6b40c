export { scheduleRecordConsumption, buildConsumptionCost, recordStreamingConsumption } from '../index'
