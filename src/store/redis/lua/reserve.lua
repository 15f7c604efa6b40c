-- enforce in reserve mode: read every counter the decision needs, evaluate the compiled
-- checks, and — when none blocks — add the reservation, all in one atomic step.
--
-- KEYS: first the read's (read.lua's members sets and totals), then three per write: the
--   bucket, the bucket's members set, the bucket's total; last, when a state is given, the
--   reservation's key.
-- ARGV[1]: r, the number of read arguments; ARGV[2 .. 1 + r]: read.lua's ARGV exactly
--   (read by groups.lua's read_groups).
-- Then c, the number of checks, and three per check: the group (1-based; 0 = always
--   blocks, -1 = never), the weight of the group's previous bucket, the threshold. A check blocks
--   when prev × weight + curr >= threshold.
-- Then the reservation's state ('' for none) and its TTL (ms), kept on an admit so that
--   settle.lua can take it once (docs/admission.md); then the API key id, and two per
--   write: the amount (a decimal string), the TTL (s). The writes are the reservation's
--   additions, in order.
-- Returns: the first blocking check (1-based, "0" when admitted and written), then two
-- per group, the summed current and previous buckets as "%.17g" strings, then the bucket
-- of each counter skipped because a key of its holds another type or not a number.
local r = tonumber(ARGV[1])
local currs, prevs = read_groups(2, 1 + r)

local at = 2 + r
local checks = tonumber(ARGV[at])
local blocked = 0
local skipped, unreserved = {}, {}
for c = 1, checks do
  local base = at + 3 * (c - 1)
  local group = tonumber(ARGV[base + 1])
  if group == 0 or group > 0 and prevs[group] * tonumber(ARGV[base + 2]) + currs[group] >= tonumber(ARGV[base + 3]) then
    blocked = c
    break
  end
end

if blocked == 0 then
  local s = at + 3 * checks + 1
  local state, state_ttl = ARGV[s], ARGV[s + 1]
  local kept = state ~= '' and 1 or 0
  local w = s + 2
  local id = ARGV[w]
  local first = #KEYS - kept - 3 * ((#ARGV - w) / 2)
  for k = 0, (#ARGV - w) / 2 - 1 do
    local bucket, members, total = KEYS[first + 1 + 3 * k], KEYS[first + 2 + 3 * k], KEYS[first + 3 + 3 * k]
    local ttl = ARGV[w + 2 + 2 * k]
    -- A counter whose keys INCRBYFLOAT or SADD would refuse is skipped (checks.lua), the
    -- others written: as a flush does, and the script never fails half-way.
    if not (holds(bucket, 'string') and holds(members, 'set') and holds(total, 'string')) then
      skipped[#skipped + 1] = bucket
      unreserved[#unreserved + 1] = k
    else
      -- Saturating at 1e15 (COUNTER_MAX), as write.lua does.
      local old = tonumber(redis.call('GET', bucket)) or 0
      if old + tonumber(ARGV[w + 1 + 2 * k]) < 1e15 then
        redis.call('INCRBYFLOAT', bucket, ARGV[w + 1 + 2 * k])
        redis.call('INCRBYFLOAT', total, ARGV[w + 1 + 2 * k])
      else
        redis.call('SET', bucket, '1e15')
        redis.call('INCRBYFLOAT', total, string.format('%.17g', 1e15 - old))
      end
      redis.call('EXPIRE', bucket, ttl)
      redis.call('EXPIRE', total, ttl)
      redis.call('SADD', members, id)
      redis.call('EXPIRE', members, ttl)
    end
  end
  -- A skipped counter holds nothing of the reservation: its index (among the additions)
  -- follows the state after a newline, so a settle adds the whole cost there and a
  -- release takes nothing away.
  if #unreserved > 0 then state = state .. '\n' .. table.concat(unreserved, ',') end
  if kept == 1 then redis.call('SET', KEYS[#KEYS], state, 'PX', state_ttl) end
end

local out = { tostring(blocked) }
for g = 1, #currs do
  out[#out + 1] = string.format('%.17g', currs[g])
  out[#out + 1] = string.format('%.17g', prevs[g])
end
for i = 1, #skipped do out[#out + 1] = skipped[i] end
return out
