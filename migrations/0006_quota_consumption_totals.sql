-- Engine-owned: per (dimension key, bucket) sums of quota_consumption, kept exact by
-- triggers so that every writer (the engine, the host's own code through its own
-- connection, a shell) updates them in the same transaction. poolConsumedTotal reads two
-- rows here instead of summing one row per API key. row_count counts the contributing
-- rows: a totals row is deleted when its last row goes, so an emptied bucket reads exactly
-- 0 and never keeps float residue. Rows with a NULL key column are not counted (and never
-- make a writer's statement fail).
CREATE TABLE IF NOT EXISTS quota_consumption_totals (
  dimension_key TEXT NOT NULL,
  bucket_index INTEGER NOT NULL,
  consumed REAL NOT NULL DEFAULT 0,
  row_count INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (dimension_key, bucket_index)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_ai
AFTER INSERT ON quota_consumption
WHEN NEW.dimension_key IS NOT NULL AND NEW.bucket_index IS NOT NULL
BEGIN
  INSERT INTO quota_consumption_totals (dimension_key, bucket_index, consumed, row_count)
  VALUES (NEW.dimension_key, NEW.bucket_index, coalesce(NEW.consumed, 0), 1)
  ON CONFLICT (dimension_key, bucket_index) DO UPDATE SET
    consumed = consumed + excluded.consumed,
    row_count = row_count + 1;
END;
-- An update that keeps the row's key (the upsert of an increment): one adjustment.
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_au
AFTER UPDATE OF dimension_key, bucket_index, consumed ON quota_consumption
WHEN NEW.dimension_key IS OLD.dimension_key AND NEW.bucket_index IS OLD.bucket_index
BEGIN
  UPDATE quota_consumption_totals
  SET consumed = consumed + (coalesce(NEW.consumed, 0) - coalesce(OLD.consumed, 0))
  WHERE dimension_key = NEW.dimension_key AND bucket_index = NEW.bucket_index;
END;
-- An update that moves the row to another dimension key or bucket: leave the old totals
-- row, join the new one.
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_am
AFTER UPDATE OF dimension_key, bucket_index, consumed ON quota_consumption
WHEN NEW.dimension_key IS NOT OLD.dimension_key OR NEW.bucket_index IS NOT OLD.bucket_index
BEGIN
  UPDATE quota_consumption_totals
  SET consumed = consumed - coalesce(OLD.consumed, 0), row_count = row_count - 1
  WHERE dimension_key = OLD.dimension_key AND bucket_index = OLD.bucket_index;
  DELETE FROM quota_consumption_totals
  WHERE dimension_key = OLD.dimension_key AND bucket_index = OLD.bucket_index AND row_count <= 0;
  INSERT INTO quota_consumption_totals (dimension_key, bucket_index, consumed, row_count)
  SELECT NEW.dimension_key, NEW.bucket_index, coalesce(NEW.consumed, 0), 1
  WHERE NEW.dimension_key IS NOT NULL AND NEW.bucket_index IS NOT NULL
  ON CONFLICT (dimension_key, bucket_index) DO UPDATE SET
    consumed = consumed + excluded.consumed,
    row_count = row_count + 1;
END;
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_ad
AFTER DELETE ON quota_consumption
BEGIN
  UPDATE quota_consumption_totals
  SET consumed = consumed - coalesce(OLD.consumed, 0), row_count = row_count - 1
  WHERE dimension_key = OLD.dimension_key AND bucket_index = OLD.bucket_index;
  DELETE FROM quota_consumption_totals
  WHERE dimension_key = OLD.dimension_key AND bucket_index = OLD.bucket_index AND row_count <= 0;
END;
