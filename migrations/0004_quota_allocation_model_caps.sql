-- Per-model caps of one API key inside one pool (docs/contract.md §5, §7 step 2).
CREATE TABLE IF NOT EXISTS quota_allocation_model_caps (
  pool_id TEXT NOT NULL,
  api_key_id TEXT NOT NULL,
  model TEXT NOT NULL,
  cap_value REAL NOT NULL CHECK (cap_value > 0),
  cap_unit TEXT NOT NULL CHECK (cap_unit IN ('percent', 'requests', 'tokens', 'usd')),
  PRIMARY KEY (pool_id, api_key_id, model)
);
CREATE INDEX IF NOT EXISTS idx_qamc_pool_key ON quota_allocation_model_caps (pool_id, api_key_id);
