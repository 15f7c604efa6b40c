-- Shared by read.lua and reserve.lua (prepended when the scripts are built): the counter
-- groups of a read.
--
-- read_groups(at, last): the read arguments start at ARGV[at]: the bucket key prefix
-- ("omniroute:quota:", plus "{<pool>}:" in a cluster), n, the n API key ids, then up to
-- ARGV[last] four per group: dimension key, current bucket, previous bucket, who:
--   who = i > 0: the buckets of id i;
--   who = -j < 0: the pool's — every id, plus every member of KEYS[j] (the current
--   bucket's set) and KEYS[j + 1] (the previous bucket's) not among them;
--   who = "tj": the pool's, from the buckets' totals KEYS[j] (current) and KEYS[j + 1]
--   (previous): two GETs, whatever the pool's size (docs/redis.md#pool-totals).
-- Returns two lists, each group's summed current and previous buckets (numbers).
local function read_groups(at, last)
  local prefix = ARGV[at]
  local n = tonumber(ARGV[at + 1])
  local ids, is_id = {}, {}
  for i = 1, n do
    ids[i] = ARGV[at + 1 + i]
    is_id[ARGV[at + 1 + i]] = true
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
    return total
  end

  local currs, prevs = {}, {}
  for g = at + 2 + n, last, 4 do
    local dim, curr, prev, who = ARGV[g], ARGV[g + 1], ARGV[g + 2], ARGV[g + 3]
    local owners
    if string.sub(who, 1, 1) == 't' then
      local j = tonumber(string.sub(who, 2))
      owners = false
      currs[#currs + 1] = tonumber(redis.call('GET', KEYS[j])) or 0
      prevs[#prevs + 1] = tonumber(redis.call('GET', KEYS[j + 1])) or 0
    elseif tonumber(who) > 0 then
      who = tonumber(who)
      owners = { ids[who] }
    else
      who = tonumber(who)
      owners = {}
      for i = 1, n do owners[i] = ids[i] end
      local members = redis.call('SUNION', KEYS[-who], KEYS[1 - who])
      for i = 1, #members do
        if not is_id[members[i]] then owners[#owners + 1] = members[i] end
      end
    end
    if owners then
      local cn, pn = {}, {}
      for i = 1, #owners do
        cn[i] = prefix .. owners[i] .. ':' .. dim .. ':' .. curr
        pn[i] = prefix .. owners[i] .. ':' .. dim .. ':' .. prev
      end
      currs[#currs + 1] = sum(cn)
      prevs[#prevs + 1] = sum(pn)
    end
  end
  return currs, prevs
end

