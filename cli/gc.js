'use strict'
// `quota-engine gc`: the retention sweep now (docs/contract.md §4): counter rows not updated for
// `--days` (default QUOTA_CONSUMPTION_RETENTION_DAYS, 14) are deleted.
const native = require('../lib/native.js')
const db = require('./database.js')
const { formatNumber } = require('./format.js')

/** The `gc` command. */
function gcCommand(options, dbOption) {
  const database = db.resolveDatabase(dbOption)
  const fromEnv = options.days === undefined
  db.openEngine(database)
  // The engine reads and validates QUOTA_CONSUMPTION_RETENTION_DAYS (docs/contract.md §11).
  const days = fromEnv ? native.describeSettings().find((s) => s.name === 'QUOTA_CONSUMPTION_RETENTION_DAYS').value : options.days
  const before = db.inspect(database).counterRows ?? 0
  const deleted = native.gcConsumption(days, Date.now())
  if (options.json) {
    process.stdout.write(`${JSON.stringify({ database: database.path, retentionDays: days, rowsBefore: before, deleted })}\n`)
    return 0
  }
  const why = fromEnv ? ' (QUOTA_CONSUMPTION_RETENTION_DAYS)' : ''
  process.stdout.write(
    `Deleted ${formatNumber(deleted, 0)} of ${formatNumber(before, 0)} counter rows not updated in the last ${formatNumber(days)} days${why}.\n`,
  )
  return 0
}

module.exports = { gcCommand }
