-- The write-behind flush of recordConsumption (docs/redis.md#write-behind): the increments
-- this process coalesced since its last flush, one per counter (API key, dimension, bucket),
-- added in one script — exactly what write.lua does per counter, without its reply.
--
-- KEYS, three per counter: its bucket, that bucket's members set, that bucket's total; then
-- the id of the last flush of this process applied here.
-- ARGV, three per counter: the amount (a decimal string), the TTL (seconds), the API key id;
-- then this flush's id. A process numbers its flushes upwards and sends one again (after a
-- timeout, say) before any later one, so an id at or below the last applied one was applied:
-- nothing is added again. The id is kept as long as a bucket of the flush can still be read
-- (two of its longest window, and at least a day), so a flush sent again after any wait is
-- added again only where no read can see it.
-- Returns the indices (0-based, as strings) of the counters it skipped because a key of
-- theirs holds something INCRBYFLOAT or SADD would refuse: Redis does not undo a script
-- that fails half-way, so every key is checked (checks.lua) before anything is written, and the others
-- are added once.
local cap = 1e15
local skipped = {}
local ok = {}
local n, flushed, flush_id = (#KEYS - 1) / 3, KEYS[#KEYS], tonumber(ARGV[#ARGV])
local keep = 86400
for w = 0, n - 1 do
  keep = math.max(keep, tonumber(ARGV[3 * w + 2]))
  ok[w] = holds(KEYS[3 * w + 1], 'string') and holds(KEYS[3 * w + 2], 'set') and holds(KEYS[3 * w + 3], 'string')
  if not ok[w] then skipped[#skipped + 1] = tostring(w) end
end
-- Applied already: its answer was lost, so the skips are said now.
if (tonumber(redis.call('GET', flushed)) or 0) >= flush_id then return skipped end
for w = 0, n - 1 do
  if ok[w] then
    local curr, members, total = KEYS[3 * w + 1], KEYS[3 * w + 2], KEYS[3 * w + 3]
    local amount, ttl, id = ARGV[3 * w + 1], ARGV[3 * w + 2], ARGV[3 * w + 3]
    local old = tonumber(redis.call('GET', curr)) or 0
    if old + tonumber(amount) < cap then
      redis.call('INCRBYFLOAT', curr, amount)
      redis.call('INCRBYFLOAT', total, amount)
    else
      redis.call('SET', curr, '1e15')
      redis.call('INCRBYFLOAT', total, string.format('%.17g', cap - old))
    end
    redis.call('EXPIRE', curr, ttl)
    redis.call('EXPIRE', total, ttl)
    redis.call('SADD', members, id)
    redis.call('EXPIRE', members, ttl)
  end
end
redis.call('SET', flushed, ARGV[#ARGV], 'EX', keep)
return skipped
