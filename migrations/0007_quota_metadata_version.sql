-- Engine-owned: a counter bumped by triggers whenever any writer changes a metadata
-- table, in the same transaction. The engine caches pools, allocations, plans and caps
-- and re-reads them when this counter moved; PRAGMA data_version (any commit by another
-- connection, e.g. the host's request logs) alone would empty the cache on every request.
CREATE TABLE IF NOT EXISTS quota_metadata_version (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  version INTEGER NOT NULL DEFAULT 0
);
INSERT OR IGNORE INTO quota_metadata_version (id, version) VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS quota_pools_version_ai AFTER INSERT ON quota_pools BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_pools_version_au AFTER UPDATE ON quota_pools BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_pools_version_ad AFTER DELETE ON quota_pools BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_allocations_version_ai AFTER INSERT ON quota_allocations BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_allocations_version_au AFTER UPDATE ON quota_allocations BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_allocations_version_ad AFTER DELETE ON quota_allocations BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_pool_connections_version_ai AFTER INSERT ON quota_pool_connections BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_pool_connections_version_au AFTER UPDATE ON quota_pool_connections BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_pool_connections_version_ad AFTER DELETE ON quota_pool_connections BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS provider_plans_version_ai AFTER INSERT ON provider_plans BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS provider_plans_version_au AFTER UPDATE ON provider_plans BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS provider_plans_version_ad AFTER DELETE ON provider_plans BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_allocation_model_caps_version_ai AFTER INSERT ON quota_allocation_model_caps BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_allocation_model_caps_version_au AFTER UPDATE ON quota_allocation_model_caps BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_allocation_model_caps_version_ad AFTER DELETE ON quota_allocation_model_caps BEGIN INSERT INTO quota_metadata_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
