-- recordConsumption with a reservation / releaseReservation, at most once: when KEYS[1] (the
-- reservation's state, docs/admission.md) still holds ARGV[1], delete it and add a delta of
-- any sign to buckets of one API key (the reservation's own buckets), never leaving one
-- below 0 nor above 1e15 (COUNTER_MAX, as write.lua). Returns {'1'} when it did (then the
-- bucket of each delta skipped because a key of its holds another type or not a number),
-- {'0'} when the state was gone (settled, released or expired meanwhile): nothing changed.
--
-- KEYS[1]: the reservation's key; then three per delta: the bucket, the bucket's members
--   set, the bucket's total (which gets the change actually made).
-- ARGV[1]: the state read before; ARGV[2]: the API key id; then two per delta: the delta (a
-- decimal string), the TTL (s).
-- A bucket keeps its TTL; one without (created here, or floored by SET) gets the TTL.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return { '0' } end
redis.call('DEL', KEYS[1])
local out = { '1' }
for d = 0, (#KEYS - 1) / 3 - 1 do
  local bucket, members, total = KEYS[3 * d + 2], KEYS[3 * d + 3], KEYS[3 * d + 4]
  local delta, ttl = ARGV[2 * d + 3], ARGV[2 * d + 4]
  -- A delta whose keys INCRBYFLOAT or SADD would refuse is skipped (checks.lua) and its
  -- bucket returned, the others applied: the script never fails half-way.
  if not (holds(bucket, 'string') and holds(members, 'set') and holds(total, 'string')) then
    out[#out + 1] = bucket
  else
    local old = tonumber(redis.call('GET', bucket)) or 0
    local new
    if old + tonumber(delta) >= 1e15 then
      redis.call('SET', bucket, '1e15')
      new = 1e15
    else
      new = tonumber(redis.call('INCRBYFLOAT', bucket, delta))
      if new < 0 then
        redis.call('SET', bucket, '0')
        new = 0
      end
    end
    if new - old ~= 0 then
      redis.call('INCRBYFLOAT', total, string.format('%.17g', new - old))
      redis.call('EXPIRE', total, ttl)
    end
    if redis.call('TTL', bucket) < 0 then redis.call('EXPIRE', bucket, ttl) end
    if tonumber(delta) > 0 then
      redis.call('SADD', members, ARGV[2])
      if redis.call('TTL', members) < 0 then redis.call('EXPIRE', members, ttl) end
    end
  end
end
return out
