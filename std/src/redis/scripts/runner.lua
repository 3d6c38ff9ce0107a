-- tollgate runner: decides every tier against its key, then (only if all admit and this is
-- a check, not a peek) applies every tier's write. All or nothing, one round trip.
-- ARGV: now (16-hex client time, or '' for the server's TIME), TTL slack in ms, commit
-- ('1' check / '0' peek), tier count, then per tier: algorithm name and its arguments.
-- Reply: all-admitted flag, the time used (16-hex), then per tier: allowed, remaining,
-- reset_after, retry_after, delay (16-hex).
local now
if ARGV[1] == '' then now = server_now() else now = hex(ARGV[1]) end
local slack = tonumber(ARGV[2])
local commit = ARGV[3] == '1'
local tiers = tonumber(ARGV[4])
local pos = 5
local reply = { 1, tohex(now) }
local writes = {}
for i = 1, tiers do
  local algo = ALGOS[ARGV[pos]]
  if algo == nil then return redis.error_reply('ERR tollgate: unknown algorithm ' .. tostring(ARGV[pos])) end
  local d, write
  d, write, pos = algo(KEYS[i], ARGV, pos + 1, now, slack)
  if d[1] == 0 then reply[1] = 0 end
  writes[i] = write
  local base = 2 + 5 * (i - 1)
  reply[base + 1] = d[1]
  reply[base + 2] = tohex(d[2])
  reply[base + 3] = tohex(d[3])
  reply[base + 4] = tohex(d[4])
  reply[base + 5] = tohex(d[5])
end
if reply[1] == 1 and commit then
  for i = 1, tiers do
    if writes[i] then writes[i]() end
  end
end
return reply
