-- The write-behind flush of recordConsumption (docs/redis.md#write-behind): the increments
-- this process coalesced since its last flush, one per counter (API key, dimension, bucket),
-- added in one script — exactly what write.lua does per counter, without its reply.
--
-- KEYS, three per counter: its bucket, that bucket's members set, that bucket's total.
-- ARGV, three per counter: the amount (a decimal string), the TTL (seconds), the API key id.
-- Returns an empty array (the engine reads script replies as arrays).
local cap = 1e15
for w = 0, #KEYS / 3 - 1 do
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
return {}
