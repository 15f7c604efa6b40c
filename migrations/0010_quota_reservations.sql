-- Engine-owned: reserve admission's reservations (docs/admission.md), one row per counter a
-- reservation added to, under the reservation's random 128-bit id (the caller holds only the
-- id). Settling or releasing deletes the rows in the transaction that adjusts the counters,
-- so a reservation takes effect at most once, from any process; expired rows are swept with
-- the counters' retention.
CREATE TABLE IF NOT EXISTS quota_reservations (
  id TEXT NOT NULL,
  api_key_id TEXT NOT NULL,
  dimension_key TEXT NOT NULL,
  bucket_index INTEGER NOT NULL,
  amount REAL NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (id, dimension_key, bucket_index)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_quota_reservations_expires ON quota_reservations (expires_at);
