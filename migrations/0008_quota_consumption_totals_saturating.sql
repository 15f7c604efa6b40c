-- The totals triggers of 0006 again, each row's value now taken as
-- max(min(coalesce(consumed, 0) + 0, 1e15), -1e15): a row poisoned by an older version
-- (Infinity, or text) adds a finite amount, so a totals row never computes Inf − Inf = NaN
-- (stored as NULL: the NOT NULL constraint failed every delete of such a row, `clear` and
-- the retention sweep included). Written rows never exceed 1e15 (COUNTER_MAX, the upserts
-- saturate), so for them the term is the value itself. A trigger whose text differs from
-- the last definition here is dropped and recreated by the runner, and the totals rebuilt.
DROP TRIGGER IF EXISTS quota_consumption_totals_ai;
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_ai
AFTER INSERT ON quota_consumption
WHEN NEW.dimension_key IS NOT NULL AND NEW.bucket_index IS NOT NULL
BEGIN
  INSERT INTO quota_consumption_totals (dimension_key, bucket_index, consumed, row_count)
  VALUES (NEW.dimension_key, NEW.bucket_index, max(min(coalesce(NEW.consumed, 0) + 0, 1e15), -1e15), 1)
  ON CONFLICT (dimension_key, bucket_index) DO UPDATE SET
    consumed = consumed + excluded.consumed,
    row_count = row_count + 1;
END;
DROP TRIGGER IF EXISTS quota_consumption_totals_au;
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_au
AFTER UPDATE OF dimension_key, bucket_index, consumed ON quota_consumption
WHEN NEW.dimension_key IS OLD.dimension_key AND NEW.bucket_index IS OLD.bucket_index
BEGIN
  UPDATE quota_consumption_totals
  SET consumed = consumed + (max(min(coalesce(NEW.consumed, 0) + 0, 1e15), -1e15) - max(min(coalesce(OLD.consumed, 0) + 0, 1e15), -1e15))
  WHERE dimension_key = NEW.dimension_key AND bucket_index = NEW.bucket_index;
END;
DROP TRIGGER IF EXISTS quota_consumption_totals_am;
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_am
AFTER UPDATE OF dimension_key, bucket_index, consumed ON quota_consumption
WHEN NEW.dimension_key IS NOT OLD.dimension_key OR NEW.bucket_index IS NOT OLD.bucket_index
BEGIN
  UPDATE quota_consumption_totals
  SET consumed = consumed - max(min(coalesce(OLD.consumed, 0) + 0, 1e15), -1e15), row_count = row_count - 1
  WHERE dimension_key = OLD.dimension_key AND bucket_index = OLD.bucket_index;
  DELETE FROM quota_consumption_totals
  WHERE dimension_key = OLD.dimension_key AND bucket_index = OLD.bucket_index AND row_count <= 0;
  INSERT INTO quota_consumption_totals (dimension_key, bucket_index, consumed, row_count)
  SELECT NEW.dimension_key, NEW.bucket_index, max(min(coalesce(NEW.consumed, 0) + 0, 1e15), -1e15), 1
  WHERE NEW.dimension_key IS NOT NULL AND NEW.bucket_index IS NOT NULL
  ON CONFLICT (dimension_key, bucket_index) DO UPDATE SET
    consumed = consumed + excluded.consumed,
    row_count = row_count + 1;
END;
DROP TRIGGER IF EXISTS quota_consumption_totals_ad;
CREATE TRIGGER IF NOT EXISTS quota_consumption_totals_ad
AFTER DELETE ON quota_consumption
BEGIN
  UPDATE quota_consumption_totals
  SET consumed = consumed - max(min(coalesce(OLD.consumed, 0) + 0, 1e15), -1e15), row_count = row_count - 1
  WHERE dimension_key = OLD.dimension_key AND bucket_index = OLD.bucket_index;
  DELETE FROM quota_consumption_totals
  WHERE dimension_key = OLD.dimension_key AND bucket_index = OLD.bucket_index AND row_count <= 0;
END;
