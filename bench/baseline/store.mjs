// The baseline: a straightforward implementation of the quota store and hot path, the way
// the host's TypeScript does it today — better-sqlite3, one statement per operation,
// autocommit, pool totals summed over every key's rows. Same schema as the engine's
// migrations 0001–0003, same pragmas (WAL, synchronous NORMAL, busy_timeout 2000).
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const Database = require('better-sqlite3')

export const WINDOW_MS = {
  hourly: 3_600_000,
  '5h': 5 * 3_600_000,
  daily: 86_400_000,
  weekly: 7 * 86_400_000,
  monthly: 30 * 86_400_000,
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS quota_consumption (
  api_key_id TEXT NOT NULL,
  dimension_key TEXT NOT NULL,
  bucket_index INTEGER NOT NULL,
  consumed REAL DEFAULT 0,
  updated_at INTEGER,
  PRIMARY KEY (api_key_id, dimension_key, bucket_index)
);
CREATE INDEX IF NOT EXISTS idx_quota_consumption_dimension_bucket ON quota_consumption (dimension_key, bucket_index);
CREATE INDEX IF NOT EXISTS idx_quota_consumption_updated_at ON quota_consumption (updated_at);
CREATE TABLE IF NOT EXISTS quota_pools (
  id TEXT PRIMARY KEY,
  connection_id TEXT NOT NULL,
  name TEXT NOT NULL,
  created_at TEXT DEFAULT CURRENT_TIMESTAMP,
  group_id TEXT
);
CREATE TABLE IF NOT EXISTS quota_allocations (
  pool_id TEXT NOT NULL REFERENCES quota_pools (id) ON DELETE CASCADE,
  api_key_id TEXT NOT NULL,
  weight REAL NOT NULL CHECK (weight >= 0 AND weight <= 100),
  cap_value REAL,
  cap_unit TEXT CHECK (cap_unit IS NULL OR cap_unit IN ('percent', 'requests', 'tokens', 'usd')),
  policy TEXT NOT NULL DEFAULT 'hard' CHECK (policy IN ('hard', 'soft', 'burst')),
  PRIMARY KEY (pool_id, api_key_id)
);
CREATE INDEX IF NOT EXISTS idx_quota_allocations_api_key ON quota_allocations (api_key_id);
CREATE TABLE IF NOT EXISTS quota_pool_connections (
  pool_id TEXT NOT NULL,
  connection_id TEXT NOT NULL,
  created_at TEXT DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (pool_id, connection_id)
);
CREATE TABLE IF NOT EXISTS provider_plans (
  connection_id TEXT PRIMARY KEY,
  provider TEXT NOT NULL,
  dimensions_json TEXT NOT NULL DEFAULT '[]',
  source TEXT NOT NULL DEFAULT 'manual' CHECK (source IN ('auto', 'manual')),
  updated_at TEXT DEFAULT CURRENT_TIMESTAMP
);
`

const dimKeyString = (dim) => `${dim.poolId}:${dim.unit}:${dim.window}`
const effective = (prev, curr, now, windowMs) => {
  const elapsed = now - Math.floor(now / windowMs) * windowMs
  return prev * (1 - elapsed / windowMs) + curr
}

export function openBaseline(file) {
  const db = new Database(file)
  db.pragma('journal_mode = WAL')
  db.pragma('busy_timeout = 2000')
  db.pragma('synchronous = NORMAL')
  db.pragma('foreign_keys = ON')
  db.exec(SCHEMA)

  const st = {
    upsert: db.prepare(`
      INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at)
      VALUES (?, ?, ?, ?, ?)
      ON CONFLICT (api_key_id, dimension_key, bucket_index) DO UPDATE SET
        consumed = coalesce(consumed, 0) + excluded.consumed, updated_at = excluded.updated_at`),
    bucket: db.prepare(
      'SELECT consumed FROM quota_consumption WHERE api_key_id = ? AND dimension_key = ? AND bucket_index = ?',
    ),
    poolSum: db.prepare(`
      SELECT
        SUM(CASE WHEN bucket_index = ? THEN coalesce(consumed, 0) ELSE 0 END) AS curr,
        SUM(CASE WHEN bucket_index = ? THEN coalesce(consumed, 0) ELSE 0 END) AS prev
      FROM quota_consumption WHERE dimension_key = ? AND bucket_index IN (?, ?)`),
    keyAllocations: db.prepare(
      'SELECT pool_id, api_key_id, weight, cap_value, cap_unit, policy FROM quota_allocations WHERE api_key_id = ?',
    ),
    pool: db.prepare('SELECT id, connection_id, name, created_at, group_id FROM quota_pools WHERE id = ?'),
    poolConnections: db.prepare(
      'SELECT connection_id FROM quota_pool_connections WHERE pool_id = ? ORDER BY created_at',
    ),
    plan: db.prepare('SELECT connection_id, provider, dimensions_json, source FROM provider_plans WHERE connection_id = ?'),
  }

  // --- the QuotaStore (async, like the host's interface) ---------------------------------
  function pairAt(apiKeyId, key, bucket) {
    const curr = st.bucket.get(apiKeyId, key, bucket)?.consumed ?? 0
    const prev = st.bucket.get(apiKeyId, key, bucket - 1)?.consumed ?? 0
    return { curr, prev }
  }
  function peekSync(apiKeyId, dim, now = Date.now()) {
    const w = WINDOW_MS[dim.window]
    const { curr, prev } = pairAt(apiKeyId, dimKeyString(dim), Math.floor(now / w))
    return effective(prev, curr, now, w)
  }
  function consumeSync(apiKeyId, dim, cost, now = Date.now()) {
    const w = WINDOW_MS[dim.window]
    const key = dimKeyString(dim)
    const bucket = Math.floor(now / w)
    st.upsert.run(apiKeyId, key, bucket, cost, now)
    const { curr, prev } = pairAt(apiKeyId, key, bucket)
    return effective(prev, curr, now, w)
  }
  function poolTotalSync(dim, now = Date.now()) {
    const w = WINDOW_MS[dim.window]
    const bucket = Math.floor(now / w)
    const row = st.poolSum.get(bucket, bucket - 1, dimKeyString(dim), bucket, bucket - 1)
    return { curr: row.curr ?? 0, prev: row.prev ?? 0, value: effective(row.prev ?? 0, row.curr ?? 0, now, w) }
  }

  const store = {
    async consume(apiKeyId, dim, cost) {
      return consumeSync(apiKeyId, dim, cost)
    },
    async peek(apiKeyId, dim) {
      return peekSync(apiKeyId, dim)
    },
    async poolConsumedTotal(_poolId, dim) {
      return poolTotalSync(dim).value
    },
  }

  // --- the hot path -------------------------------------------------------------------------
  function matchPool(apiKeyId, connectionId) {
    for (const a of st.keyAllocations.all(apiKeyId)) {
      const pool = st.pool.get(a.pool_id)
      if (!pool) continue
      const members = st.poolConnections.all(pool.id).map((r) => r.connection_id)
      if (members.length === 0) members.push(pool.connection_id)
      if (members.includes(connectionId)) return { pool, members, allocation: a }
    }
    return null
  }
  function planOf(connectionId) {
    const row = st.plan.get(connectionId)
    return row ? JSON.parse(row.dimensions_json) : []
  }

  async function enforceQuotaShare({ apiKeyId, connectionId, provider }, saturationThreshold = 0.5, saturation = 0) {
    const match = matchPool(apiKeyId, connectionId)
    if (!match) return { kind: 'allow' }
    const dims = planOf(connectionId).filter((d) => d.limit > 1e-9)
    if (dims.length === 0) return { kind: 'allow' }
    const { pool, members, allocation } = match
    const multiplier = Math.max(members.length, 1)
    for (const d of dims) {
      const dim = { poolId: pool.id, unit: d.unit, window: d.window }
      const limit = d.limit * multiplier
      const mine = peekSync(apiKeyId, dim)
      const total = poolTotalSync(dim).value
      const fairShare = (allocation.weight / 100) * limit
      if (allocation.cap_value != null && allocation.cap_unit === d.unit && mine >= allocation.cap_value) {
        return { kind: 'block', reason: `Absolute quota cap reached for your API key on ${provider}`, httpStatus: 429 }
      }
      if (total >= limit) {
        return { kind: 'block', reason: `Provider ${provider} quota window is saturated; no shared capacity available`, httpStatus: 429 }
      }
      const strict = saturation >= saturationThreshold
      if (allocation.policy === 'hard' && (strict ? mine >= fairShare : mine >= limit)) {
        return { kind: 'block', reason: `Quota share limit reached for your API key on ${provider}`, httpStatus: 429 }
      }
    }
    return { kind: 'allow', deprioritize: false }
  }

  async function recordConsumption({ apiKeyId, connectionId, cost }) {
    const match = matchPool(apiKeyId, connectionId)
    if (!match) return
    const now = Date.now()
    for (const d of planOf(connectionId)) {
      const amount = d.unit === 'tokens' ? cost.tokens ?? 0 : d.unit === 'usd' ? cost.usd ?? 0 : d.unit === 'requests' ? cost.requests ?? 1 : 0
      if (!(amount > 0)) continue
      const w = WINDOW_MS[d.window]
      st.upsert.run(apiKeyId, `${match.pool.id}:${d.unit}:${d.window}`, Math.floor(now / w), amount, now)
    }
  }

  // --- setup helpers (not measured) ------------------------------------------------------
  const insertPool = db.prepare('INSERT INTO quota_pools (id, connection_id, name) VALUES (?, ?, ?)')
  const insertAlloc = db.prepare('INSERT INTO quota_allocations (pool_id, api_key_id, weight, policy) VALUES (?, ?, ?, ?)')
  const insertMember = db.prepare('INSERT INTO quota_pool_connections (pool_id, connection_id) VALUES (?, ?)')
  const insertPlan = db.prepare(
    "INSERT OR REPLACE INTO provider_plans (connection_id, provider, dimensions_json, source) VALUES (?, ?, ?, 'manual')",
  )
  const setup = {
    createPool({ id, connectionId, name, allocations }) {
      db.transaction(() => {
        insertPool.run(id, connectionId, name)
        for (const a of allocations) insertAlloc.run(id, a.apiKeyId, a.weight, a.policy)
        insertMember.run(id, connectionId)
      })()
    },
    upsertProviderPlan({ connectionId, provider, dimensions }) {
      insertPlan.run(connectionId, provider, JSON.stringify(dimensions))
    },
    seed(rows) {
      db.transaction(() => {
        for (const [apiKeyId, dim, bucket, consumed, now] of rows) st.upsert.run(apiKeyId, dimKeyString(dim), bucket, consumed, now)
      })()
    },
  }

  return { db, store, enforceQuotaShare, recordConsumption, setup, close: () => db.close() }
}
