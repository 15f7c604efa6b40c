-- peek / poolConsumedTotal / poolUsage / enforce: read every counter a call needs.
--
-- KEYS: the buckets' members sets the groups below name (they also route the call in a
--   cluster: every key of one pool shares a hash slot).
-- ARGV: the read arguments of groups.lua's read_groups, from ARGV[1] to the end.
-- Returns two per group: the summed current and previous buckets, as "%.17g" strings
-- (a Lua number would be truncated to an integer reply).
local currs, prevs = read_groups(1, #ARGV)
local out = {}
for g = 1, #currs do
  out[#out + 1] = string.format('%.17g', currs[g])
  out[#out + 1] = string.format('%.17g', prevs[g])
end
return out
