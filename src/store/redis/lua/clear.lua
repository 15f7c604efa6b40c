-- clear: delete one key's current and previous buckets, taking their values out of the
-- buckets' totals (docs/redis.md#pool-totals).
--
-- KEYS: the current bucket, the previous bucket, the current bucket's total, the previous
-- bucket's total. Returns nothing.
for b = 1, 2 do
  local value = tonumber(redis.call('GET', KEYS[b]))
  if value and value ~= 0 and redis.call('EXISTS', KEYS[b + 2]) == 1 then
    local left = tonumber(redis.call('INCRBYFLOAT', KEYS[b + 2], string.format('%.17g', -value)))
    -- Never below 0 (a bucket an old replica also wrote holds more than the total counted).
    if left < 0 then redis.call('SET', KEYS[b + 2], '0', 'KEEPTTL') end
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
return {}
