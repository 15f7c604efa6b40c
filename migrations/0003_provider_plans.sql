-- Per-connection plan overrides (docs/contract.md §5, §6); dimensions_json is a QuotaDimension[].
CREATE TABLE IF NOT EXISTS provider_plans (
  connection_id TEXT PRIMARY KEY,
  provider TEXT NOT NULL,
  dimensions_json TEXT NOT NULL,
  source TEXT NOT NULL DEFAULT 'manual' CHECK (source IN ('auto', 'manual')),
  updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE INDEX IF NOT EXISTS idx_provider_plans_provider ON provider_plans (provider);
