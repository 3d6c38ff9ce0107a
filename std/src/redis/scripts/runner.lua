-- tollgate runner (RedisLimiter): decides every tier against its key, then (only if all
-- admit and this is a check, not a peek) applies every tier's write. All or nothing, one
-- round trip. States are stored bare (see store.lua for the policy store's tagged states).
-- ARGV: now (16-hex client time, or '' for the server's TIME), TTL slack in ms, commit
-- ('1' check / '0' peek), tier count, then per tier: algorithm name and its arguments.
-- Reply: all-admitted flag, the time used (ms, to within one: a diagnostic), then per tier: allowed, remaining,
-- reset_after, retry_after, delay (each an integer below 2^53, or 16 hex digits).
-- `main` is the entry point (FCALL's function, or the EVAL body's return); no function is
-- defined per call.
local function main(KEYS, ARGV)
  if floor == nil then bind() end
  NL = BASE_NL
  local hi, lo
  if ARGV[1] == '' then hi, lo = server_time() else hi, lo = halves(ARGV[1]) end
  set_now(hi, lo, false)
  local now = NOW_ABS
  local slack = tonumber(ARGV[2], 10)
  local commit = ARGV[3] == '1'
  local tiers = tonumber(ARGV[4], 10)
  local pos = 5
  local reply = { 1, NOW_MS }
  local writes = {}
  for i = 1, tiers do
    local key = KEYS[i]
    local algo = ALGOS[ARGV[pos]]
    if algo == nil then return redis.error_reply('ERR tollgate: unknown algorithm ' .. tostring(ARGV[pos])) end
    pos = pos + 1
    local d, next, span
    if algo.fields == 0 then
      local view = zset_view(key, redis.call('ZCARD', key), 0)
      d, next, span = algo.decide(view, ARGV, pos, now, false)
      if next then
        local limit_n = arg(ARGV[pos + 1])
        writes[i] = { key = key, log = view, next = next, span = span, limit_n = limit_n }
      end
    else
      d, next, span = algo.decide(fields(redis.call('GET', key), algo.fields), ARGV, pos, now, false)
      if next then
        writes[i] = { key = key, next = next, span = span }
      end
    end
    pos = pos + algo.args
    if d[1] == 0 then reply[1] = 0 end
    put_decision(reply, i, d)
  end
  if reply[1] == 1 and commit then
    for i = 1, tiers do
      local w = writes[i]
      if w and w.log then
        zset_append(w.key, w.next[1], w.next[2], w.log:next_seq())
        local excess = w.log.n + w.next[2] - w.limit_n
        if excess > 0 then redis.call('ZREMRANGEBYRANK', w.key, 0, excess - 1) end
        redis.call('PEXPIRE', w.key, ttl_ms(w.span, slack))
      elseif w then
        local value = ''
        for j = 1, #w.next do value = value .. tohex(w.next[j]) end
        redis.call('SET', w.key, value, 'PX', ttl_ms(w.span, slack))
      end
    end
  end
  return reply
end
