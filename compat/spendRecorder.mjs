import entry from './spendRecorder.js'

export const {
  scheduleRecordConsumption,
  buildConsumptionCost,
  recordStreamingConsumption,
} = entry
