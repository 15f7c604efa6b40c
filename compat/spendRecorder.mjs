import entry from './spendRecorder.js'

export const {
  scheduleRecordConsumption,
  buildConsumptionCost,
  recordStreamingConsumption,
} = entry

// `import x from` gives what require() gives, as Node does for a CommonJS file.
export default entry
