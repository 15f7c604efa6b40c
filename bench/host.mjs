// The host fixture: OmniRoute as it really runs the engine, for every benchmark and for the
// integration tests that must see what the host sees.
//
// - `installHost({ dbPath: () => SQLITE_FILE, registerDbStateResetter, logger })` runs as
//   soon as a module imports the quota entries; the path function answers `undefined` until
//   the host's database module has loaded, then the path (options.dbPath: 'string' or a
//   fixed string for the comparison rows).
// - The host's database module opens `DATA_DIR/storage.sqlite` first, with better-sqlite3 and
//   the host's pragmas in the host's order, then runs its migrations: its own tables (about
//   120), among them `quota_consumption`, the pool, allocation, plan and model-cap tables and
//   `key_value`, all before the engine first opens the file.
// - Per request the host commits a `call_logs` row (the columns its request logger writes);
//   now and then it runs `wal_checkpoint(TRUNCATE)` (options.checkpointMs; the host's close
//   and restore always do).
// - Its state reset (`resetAllDbModuleState`) calls every registered resetter; its restore
//   closes its connection, unlinks `storage.sqlite`, `-wal`, `-shm`, `-journal`, copies the
//   backup in and reopens, while the engine's connection stays open.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const Database = require('better-sqlite3')

/** The host's connection settings, in the order its database module applies them. */
export const HOST_PRAGMAS = [
  'journal_mode = WAL',
  'busy_timeout = 2000',
  'synchronous = NORMAL',
  'cache_size = -16384',
  'temp_store = MEMORY',
]
const MMAP = 'mmap_size = 268435456' // applied last, after the migrations

// The quota tables as the host's migrations create them (its schema, not the engine's).
const QUOTA_TABLES = `
CREATE TABLE IF NOT EXISTS key_value (namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (namespace, key));
CREATE TABLE IF NOT EXISTS quota_consumption (api_key_id TEXT NOT NULL, dimension_key TEXT NOT NULL, bucket_index INTEGER NOT NULL,
  consumed REAL NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL, PRIMARY KEY (api_key_id, dimension_key, bucket_index));
CREATE INDEX IF NOT EXISTS idx_quota_consumption_dim_bucket ON quota_consumption(dimension_key, bucket_index);
CREATE INDEX IF NOT EXISTS idx_quota_consumption_updated_at ON quota_consumption(updated_at);
CREATE TABLE IF NOT EXISTS provider_plans (connection_id TEXT PRIMARY KEY, provider TEXT NOT NULL, dimensions_json TEXT NOT NULL,
  source TEXT NOT NULL CHECK (source IN ('auto','manual')) DEFAULT 'manual', updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
CREATE INDEX IF NOT EXISTS idx_provider_plans_provider ON provider_plans(provider);
CREATE TABLE IF NOT EXISTS quota_pools (id TEXT PRIMARY KEY, connection_id TEXT NOT NULL, name TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
CREATE INDEX IF NOT EXISTS idx_quota_pools_connection ON quota_pools(connection_id);
CREATE TABLE IF NOT EXISTS quota_allocations (pool_id TEXT NOT NULL REFERENCES quota_pools(id) ON DELETE CASCADE, api_key_id TEXT NOT NULL,
  weight REAL NOT NULL CHECK (weight >= 0 AND weight <= 100), cap_value REAL, cap_unit TEXT CHECK (cap_unit IN ('percent','requests','tokens','usd')),
  policy TEXT NOT NULL CHECK (policy IN ('hard','soft','burst')) DEFAULT 'hard', PRIMARY KEY (pool_id, api_key_id));
CREATE INDEX IF NOT EXISTS idx_quota_allocations_apikey ON quota_allocations(api_key_id);
CREATE TABLE IF NOT EXISTS quota_pool_connections (pool_id TEXT NOT NULL, connection_id TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (datetime('now')), PRIMARY KEY (pool_id, connection_id));
CREATE INDEX IF NOT EXISTS idx_quota_pool_connections_pool ON quota_pool_connections(pool_id);
CREATE TABLE IF NOT EXISTS quota_allocation_model_caps (pool_id TEXT NOT NULL, api_key_id TEXT NOT NULL, model TEXT NOT NULL,
  cap_value REAL NOT NULL CHECK (cap_value > 0), cap_unit TEXT NOT NULL CHECK (cap_unit IN ('percent','requests','tokens','usd')),
  PRIMARY KEY (pool_id, api_key_id, model));
CREATE INDEX IF NOT EXISTS idx_qamc_pool_key ON quota_allocation_model_caps(pool_id, api_key_id);
`
// The host's pool groups step, which adds quota_pools.group_id: its runner skips it when the
// table and the column are there, and takes a "duplicate column name" failure (the step
// rolled back whole) as applied.
const QUOTA_GROUPS = `
CREATE TABLE IF NOT EXISTS quota_groups (id TEXT PRIMARY KEY, name TEXT NOT NULL, created_at TEXT NOT NULL DEFAULT (datetime('now')));
INSERT OR IGNORE INTO quota_groups (id, name) VALUES ('group-demo', 'GroupDemo');
ALTER TABLE quota_pools ADD COLUMN group_id TEXT;
UPDATE quota_pools SET group_id = 'group-demo' WHERE group_id IS NULL OR group_id = '';
`
const CALL_LOGS = `
CREATE TABLE IF NOT EXISTS call_logs (id TEXT PRIMARY KEY, timestamp TEXT NOT NULL, method TEXT, path TEXT, status INTEGER, model TEXT,
  requested_model TEXT, provider TEXT, account TEXT, connection_id TEXT, duration INTEGER DEFAULT 0, tokens_in INTEGER DEFAULT 0,
  tokens_out INTEGER DEFAULT 0, api_key_id TEXT, api_key_name TEXT, combo_name TEXT, error_summary TEXT,
  detail_state TEXT DEFAULT 'none', request_summary TEXT, correlation_id TEXT);
CREATE INDEX IF NOT EXISTS idx_cl_timestamp ON call_logs(timestamp);
CREATE INDEX IF NOT EXISTS idx_cl_status ON call_logs(status);
CREATE INDEX IF NOT EXISTS idx_cl_correlation_id ON call_logs(correlation_id);
`
/** The host's other tables: enough of them that the schema is the size of the host's. */
const OTHER_TABLES = Array.from(
  { length: 110 },
  (_, i) => `CREATE TABLE IF NOT EXISTS host_table_${i} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, data TEXT, created_at TEXT DEFAULT (datetime('now')));
CREATE INDEX IF NOT EXISTS idx_host_table_${i}_name ON host_table_${i}(name);`,
).join('\n')
const INSERT_CALL_LOG = `INSERT INTO call_logs (id, timestamp, method, path, status, model, requested_model, provider, connection_id,
  duration, tokens_in, tokens_out, api_key_id, api_key_name, detail_state, request_summary, correlation_id)
  VALUES (?, ?, 'POST', '/v1/chat/completions', 200, ?, ?, ?, ?, 812, 900, 300, ?, 'bench key', 'none', ?, ?)`
const SUMMARY = JSON.stringify({ messages: 3, stream: false, finish: 'stop' })

/** Runs the host's migrations on its connection (its schema, before the engine's first open). */
export function migrateHost(db) {
  db.exec(`CREATE TABLE IF NOT EXISTS _omniroute_migrations (version TEXT PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT (datetime('now')));`)
  db.transaction(() => db.exec(QUOTA_TABLES + CALL_LOGS + OTHER_TABLES))()
  const has = (sql, ...args) => db.prepare(sql).get(...args) !== undefined
  const groups = has("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'quota_groups'")
  if (groups && has("SELECT 1 FROM pragma_table_info('quota_pools') WHERE name = 'group_id'")) return
  try {
    db.transaction(() => db.exec(QUOTA_GROUPS))()
  } catch (err) {
    if (!/duplicate column name/.test(err.message)) throw err
  }
}

/** Opens the host's connection as its database module does. */
export function openHostDb(file) {
  const db = new Database(file)
  for (const pragma of HOST_PRAGMAS) db.pragma(pragma)
  migrateHost(db)
  db.pragma(MMAP)
  return db
}

/**
 * Starts the host: a `DATA_DIR`, the quota entries installed as the host installs them, then
 * its database module. `dbPath`: 'function' (the host's form), 'string', or 'none'.
 */
export function startHost({ dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-host-')), dbPath = 'function', checkpointMs = 1000, logger } = {}) {
  process.env.DATA_DIR = dir
  const file = path.join(dir, 'storage.sqlite')
  const { installHost } = require('@omniroute/quota-engine/compat/host')
  const logs = []
  const resetters = new Set()
  let loaded = false
  const options = {
    registerDbStateResetter: (reset) => resetters.add(reset),
    logger: logger ?? {
      warn: (fields, msg) => logs.push({ level: 'warn', msg, fields }),
      info: () => {},
      debug: () => {},
      error: (fields, msg) => logs.push({ level: 'error', msg, fields }),
    },
  }
  if (dbPath === 'function') options.dbPath = () => (loaded ? file : undefined)
  else if (dbPath === 'string') options.dbPath = file
  installHost(options)

  const host = { dir, file, logs, db: null, insert: null, timer: null }
  host.open = () => {
    host.db = openHostDb(file)
    host.insert = host.db.prepare(INSERT_CALL_LOG)
    loaded = true
  }
  host.open()
  if (checkpointMs > 0) {
    host.timer = setInterval(() => host.db?.pragma('wal_checkpoint(TRUNCATE)'), checkpointMs)
    host.timer.unref()
  }
  let seq = 0
  /** The host's per-request row. */
  host.logCall = (apiKeyId, connectionId = 'conn', provider = 'provider', model = 'gpt-x') => {
    const n = ++seq
    host.insert.run(`log-${n}`, new Date().toISOString(), model, model, provider, connectionId, apiKeyId, SUMMARY, `corr-${n}`)
  }
  /** `resetAllDbModuleState()`: every registered resetter, each failure only logged. */
  host.resetState = () => {
    for (const reset of resetters) {
      try {
        reset()
      } catch (err) {
        logs.push({ level: 'warn', msg: `[DB] Failed to reset module state: ${err}` })
      }
    }
  }
  /** `closeDbInstance()`: checkpoint, close, reset the modules' state. */
  host.close = () => {
    try {
      host.db?.pragma('wal_checkpoint(TRUNCATE)')
      host.db?.close()
    } finally {
      host.db = null
      host.resetState()
    }
  }
  /** The host's backup (SQLite's backup API). */
  host.backup = (to) => host.db.backup(to)
  /** The host's restore: close, unlink the four files, copy the backup in, reopen. */
  host.restore = (from) => {
    host.close()
    host.resetState()
    for (const suffix of ['', '-wal', '-shm', '-journal']) fs.rmSync(file + suffix, { force: true })
    fs.copyFileSync(from, file)
    host.open()
  }
  /** Stops the timer and closes the host's connection (`closeDbInstance()`). */
  host.stop = () => {
    clearInterval(host.timer)
    if (host.db) host.close()
  }
  return host
}
