'use strict'
// Which database the CLI works on, and the checks made before anything opens it: the CLI
// never creates a database (the engine's own open would), so a missing or unreadable path
// is an error with exit code 2 before the engine is touched.
const fs = require('node:fs')
const path = require('node:path')
const native = require('../lib/native.js')
const host = require('../lib/host.js')

/** An error the CLI reports as one line on stderr, exiting with `exitCode`. */
class CliError extends Error {
  constructor(message, exitCode = 1) {
    super(message)
    this.exitCode = exitCode
  }
}

/**
 * The database path and where it came from: `--db`, `$DATA_DIR/storage.sqlite`, or the
 * host's default data directory (docs/contract.md §4).
 */
function resolveDatabase(dbOption) {
  if (dbOption) return { path: path.resolve(dbOption), source: '--db' }
  const source = process.env.DATA_DIR ? 'DATA_DIR' : 'host default data directory'
  return { path: native.defaultDbPath(), source }
}

/**
 * What is wrong with the file at `dbPath` (`null` when it can be opened): it is missing,
 * a directory, or not readable and writable by this user.
 */
function problemWith(dbPath) {
  let stat
  try {
    stat = fs.statSync(dbPath)
  } catch (err) {
    if (err.code === 'ENOENT') return `no database at ${dbPath} (give --db <path>, or set DATA_DIR to the folder of storage.sqlite)`
    return `cannot read ${dbPath}: ${err.message}`
  }
  if (stat.isDirectory()) return `${dbPath} is a directory, not a database file (did you mean ${path.join(dbPath, 'storage.sqlite')}?)`
  try {
    fs.accessSync(dbPath, fs.constants.R_OK)
  } catch {
    return `cannot read ${dbPath}: permission denied`
  }
  return null
}

/** Throws a `CliError` (exit code 2) unless the database exists and is readable. */
function requireDatabase(db) {
  const problem = problemWith(db.path)
  if (problem) throw new CliError(problem, 2)
}

/** CLI warnings: one readable line on stderr per engine warning. */
const cliLogger = {
  warn(obj, msg) {
    const component = obj && obj.component ? ` (${obj.component})` : ''
    const detail = obj && (obj.detail || obj.error) ? `: ${obj.detail || obj.error}` : ''
    process.stderr.write(`warning${component}: ${msg}${detail}\n`)
  },
  info() {},
  debug() {},
}

/**
 * Points the engine at an existing database and opens it (as the host's first request
 * would: a missing engine table is created). Throws a `CliError` (exit code 2) when the
 * file is missing, unreadable, not writable or not a database.
 */
function openEngine(db) {
  requireDatabase(db)
  try {
    fs.accessSync(db.path, fs.constants.W_OK)
  } catch {
    throw new CliError(`cannot open ${db.path} for writing (the engine opens it read-write): permission denied`, 2)
  }
  host.installHost({ dbPath: db.path, logger: cliLogger })
  try {
    native.listPools({ limit: 1 })
  } catch (err) {
    throw new CliError(`cannot open ${db.path}: ${err.message.replace(/^quota store error: /, '')}`, 2)
  }
}

/** Reads the database without writing (see `inspectDatabase`); a `CliError` when it cannot. */
function inspect(db) {
  requireDatabase(db)
  try {
    return native.inspectDatabase(db.path)
  } catch (err) {
    throw new CliError(`cannot read ${db.path}: ${err.message.replace(/^quota store error: /, '')}`, 2)
  }
}

/** Closes the engine's connection (before the process exits). */
function closeEngine() {
  try {
    native.closeQuotaDb()
  } catch {
    // Nothing useful to do at exit.
  }
}

/** Every pool, across pages. */
function allPools() {
  const pools = []
  for (let offset = 0; ; offset += 100) {
    const page = native.listPools({ limit: 100, offset })
    pools.push(...page.items)
    if (page.items.length === 0 || pools.length >= page.total) return pools
  }
}

/**
 * The provider of each connection the database knows: a stored plan row's provider first,
 * then the host's `provider_connections` row. `Map<connectionId, provider>`.
 */
function providersOf(inspection) {
  const providers = new Map()
  for (const row of inspection.hostConnections || []) if (row.provider) providers.set(row.id, row.provider)
  for (const row of inspection.planRows) if (row.provider) providers.set(row.connectionId, row.provider)
  return providers
}

/**
 * `resolvePlan`'s answer and where it came from: `stored` (a `provider_plans` row),
 * `catalog`, or `none`.
 */
function resolvedPlan(connectionId, provider) {
  const plan = native.resolvePlan(connectionId, provider || '')
  const origin = plan.connectionId !== null ? 'stored' : plan.dimensions.length > 0 ? 'catalog' : 'none'
  return { plan, origin }
}

module.exports = {
  CliError,
  resolveDatabase,
  problemWith,
  requireDatabase,
  openEngine,
  inspect,
  closeEngine,
  allPools,
  providersOf,
  resolvedPlan,
  cliLogger,
}
