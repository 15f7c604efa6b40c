-- Engine-owned: a counter bumped by triggers whenever any writer changes a counter table
-- (quota_consumption, quota_consumption_totals), in the same transaction — like
-- quota_metadata_version (0007) for the metadata tables. Its worth is not the number but
-- its page: a table of one row is one b-tree page, rewritten by every commit that changes
-- a counter, so the hot path can tell from the wal-index alone (the page numbers of the
-- frames committed since its last read) that a commit left the counters alone — the
-- host's own rows, in its own tables, go by without a database read
-- (docs/sqlite.md#decisions-that-survive-unrelated-commits).
CREATE TABLE IF NOT EXISTS quota_data_version (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  version INTEGER NOT NULL DEFAULT 0
);
INSERT OR IGNORE INTO quota_data_version (id, version) VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS quota_consumption_data_version_ai AFTER INSERT ON quota_consumption BEGIN INSERT INTO quota_data_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_consumption_data_version_au AFTER UPDATE ON quota_consumption BEGIN INSERT INTO quota_data_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_consumption_data_version_ad AFTER DELETE ON quota_consumption BEGIN INSERT INTO quota_data_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_data_version_ai AFTER INSERT ON quota_consumption_totals BEGIN INSERT INTO quota_data_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_data_version_au AFTER UPDATE ON quota_consumption_totals BEGIN INSERT INTO quota_data_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_data_version_ad AFTER DELETE ON quota_consumption_totals BEGIN INSERT INTO quota_data_version (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1; END;
