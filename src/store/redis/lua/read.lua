-- peek / poolConsumedTotal / poolUsage / enforce: read every counter a call needs.
--
-- KEYS: the buckets' members sets the groups below name (they also route the call in a
--   cluster: every key of one pool shares a hash slot).
-- ARGV[1]: the bucket key prefix ("omniroute:quota:", plus "{<pool>}:" in a cluster).
-- ARGV[2]: n, the number of API key ids; ARGV[3 .. 2 + n]: the ids.
-- Then four per group: dimension key, current bucket, previous bucket, who:
--   who = i > 0: the buckets of id i;
--   who = -j < 0: the pool's — every id, plus every member of KEYS[j] (the current
--   bucket's set) and KEYS[j + 1] (the previous bucket's) not among them.
-- Returns two per group: the summed current and previous buckets, as "%.17g" strings
-- (a Lua number would be truncated to an integer reply).
local prefix = ARGV[1]
local n = tonumber(ARGV[2])
local ids, is_id = {}, {}
for i = 1, n do
  ids[i] = ARGV[2 + i]
  is_id[ARGV[2 + i]] = true
end

local function sum(names)
  local total = 0
  for first = 1, #names, 512 do
    local values = redis.call('MGET', unpack(names, first, math.min(first + 511, #names)))
    for i = 1, #values do
      local value = values[i] and tonumber(values[i])
      if value then total = total + value end
    end
  end
  return string.format('%.17g', total)
end

local out = {}
for g = 3 + n, #ARGV, 4 do
  local dim, curr, prev, who = ARGV[g], ARGV[g + 1], ARGV[g + 2], tonumber(ARGV[g + 3])
  local owners
  if who > 0 then
    owners = { ids[who] }
  else
    owners = {}
    for i = 1, n do owners[i] = ids[i] end
    local members = redis.call('SUNION', KEYS[-who], KEYS[1 - who])
    for i = 1, #members do
      if not is_id[members[i]] then owners[#owners + 1] = members[i] end
    end
  end
  local currs, prevs = {}, {}
  for i = 1, #owners do
    currs[i] = prefix .. owners[i] .. ':' .. dim .. ':' .. curr
    prevs[i] = prefix .. owners[i] .. ':' .. dim .. ':' .. prev
  end
  out[#out + 1] = sum(currs)
  out[#out + 1] = sum(prevs)
end
return out
