-- The host's pool groups, which quota_pools.group_id names. The engine does not read this
-- table: it is here so that a file the engine created first is the one the host's own
-- migrations expect (theirs adds quota_pools.group_id in the same step as this table, and
-- skips the step when both are there). 'group-demo' is the group an empty group_id means.
CREATE TABLE IF NOT EXISTS quota_groups (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (datetime('now'))
);
INSERT OR IGNORE INTO quota_groups (id, name) VALUES ('group-demo', 'GroupDemo');
