-- Pools, their API-key allocations and their member connections (docs/contract.md §5).
CREATE TABLE IF NOT EXISTS quota_pools (
  id TEXT PRIMARY KEY,
  connection_id TEXT NOT NULL,
  name TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
  group_id TEXT
);
CREATE INDEX IF NOT EXISTS idx_quota_pools_connection ON quota_pools (connection_id);
CREATE TABLE IF NOT EXISTS quota_allocations (
  pool_id TEXT NOT NULL REFERENCES quota_pools (id) ON DELETE CASCADE,
  api_key_id TEXT NOT NULL,
  weight REAL NOT NULL CHECK (weight >= 0 AND weight <= 100),
  cap_value REAL,
  cap_unit TEXT CHECK (cap_unit IS NULL OR cap_unit IN ('percent', 'requests', 'tokens', 'usd')),
  policy TEXT NOT NULL DEFAULT 'hard' CHECK (policy IN ('hard', 'soft', 'burst')),
  PRIMARY KEY (pool_id, api_key_id)
);
CREATE INDEX IF NOT EXISTS idx_quota_allocations_apikey ON quota_allocations (api_key_id);
-- Authoritative membership: a pool's connections ordered by created_at; none = legacy
-- pool whose only member is quota_pools.connection_id.
CREATE TABLE IF NOT EXISTS quota_pool_connections (
  pool_id TEXT NOT NULL,
  connection_id TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  PRIMARY KEY (pool_id, connection_id)
);
CREATE INDEX IF NOT EXISTS idx_quota_pool_connections_pool ON quota_pool_connections (pool_id);
