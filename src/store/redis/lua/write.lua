-- recordConsumption / consume: add to the current bucket of one API key in one or more
-- dimensions, atomically, and read back what the sliding window needs.
--
-- KEYS, four per write: the current bucket, its members set (the API key ids written into
-- it), its total (the sum of every key's current bucket, docs/redis.md#pool-totals), the
-- previous bucket.
-- ARGV[1]: the API key id; then two per write: the cost (a decimal string), the TTL (seconds).
-- Returns two per write: the current bucket's new value and the previous bucket's value
-- (nil when absent), as the decimal strings Redis keeps.
-- A bucket saturates at 1e15 (COUNTER_MAX, docs/reliability.md): INCRBYFLOAT would refuse
-- an infinite result and fail the script half-way; the cap is SET instead.
local cap = 1e15
-- Every key is checked before anything is written (checks.lua): a key that INCRBYFLOAT,
-- SADD or GET would refuse fails the whole write, naming it.
for i, key in ipairs(KEYS) do
  if not holds(key, i % 4 == 2 and 'set' or 'string') then
    return redis.error_reply('ERR quota key ' .. key .. ' holds another type or not a finite number')
  end
end
local out = {}
for w = 0, #KEYS / 4 - 1 do
  local curr, members, total, prev = KEYS[4 * w + 1], KEYS[4 * w + 2], KEYS[4 * w + 3], KEYS[4 * w + 4]
  local ttl = ARGV[2 * w + 3]
  local old = tonumber(redis.call('GET', curr)) or 0
  if old + tonumber(ARGV[2 * w + 2]) < cap then
    out[2 * w + 1] = redis.call('INCRBYFLOAT', curr, ARGV[2 * w + 2])
    redis.call('INCRBYFLOAT', total, ARGV[2 * w + 2])
  else
    redis.call('SET', curr, '1e15')
    out[2 * w + 1] = '1e15'
    redis.call('INCRBYFLOAT', total, string.format('%.17g', cap - old))
  end
  redis.call('EXPIRE', curr, ttl)
  redis.call('EXPIRE', total, ttl)
  redis.call('SADD', members, ARGV[1])
  redis.call('EXPIRE', members, ttl)
  out[2 * w + 2] = redis.call('GET', prev)
end
return out
