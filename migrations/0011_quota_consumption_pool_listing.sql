-- listConsumptionForPool (docs/sqlite.md, "Listing a pool's rows"): a pool that is a small
-- share of the table reads each of its dimension keys newest first from this index, `limit`
-- rows per key, instead of sorting all its rows. Its cost falls on commits of buffered
-- records (off the request path), measured in docs/sqlite.md.
CREATE INDEX IF NOT EXISTS idx_quota_consumption_dimension_updated ON quota_consumption (dimension_key, updated_at);
