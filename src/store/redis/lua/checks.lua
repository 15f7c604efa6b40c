-- Prepended to the scripts that write counters (write, flush, reserve, settle). Redis does
-- not undo a script that fails half-way, so each checks every key first: `holds(key,
-- 'string')` when the key is absent or holds what INCRBYFLOAT accepts (a finite number, no
-- surrounding space), `holds(key, 'set')` when it is absent or a set.
local function holds(key, wanted)
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then return true end
  if kind ~= wanted then return false end
  if wanted == 'set' then return true end
  local text = redis.call('GET', key)
  local n = tonumber(text)
  -- Redis's own parser also refuses a NUL (Lua's tonumber stops there), 5,120 bytes or
  -- more, and a number so small it underflows (a non-zero digit read as 0, as 1e-5000).
  return n ~= nil and n == n and n > -math.huge and n < math.huge and #text < 5120
    and not text:find('%z') and not text:find('^%s') and not text:find('%s$')
    and not (n == 0 and text:find('^[^eE]*[1-9]'))
end
