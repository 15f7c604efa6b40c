-- Sliding-window counters (docs/contract.md §4): one row per (API key, dimension key, bucket).
-- `dimension_key` is "<poolId>:<unit>:<window>", `updated_at` epoch ms.
CREATE TABLE IF NOT EXISTS quota_consumption (
  api_key_id TEXT NOT NULL,
  dimension_key TEXT NOT NULL,
  bucket_index INTEGER NOT NULL,
  consumed REAL NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (api_key_id, dimension_key, bucket_index)
);
CREATE INDEX IF NOT EXISTS idx_quota_consumption_dim_bucket ON quota_consumption (dimension_key, bucket_index);
CREATE INDEX IF NOT EXISTS idx_quota_consumption_updated_at ON quota_consumption (updated_at);
