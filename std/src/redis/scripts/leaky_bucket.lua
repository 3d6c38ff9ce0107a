-- Leaky bucket (shaper): state F, the time the queue drains, in one string.
-- Mirrors tollgate_core::LeakyBucket::decide. Arguments (4): drain interval, horizon = Q/r,
-- cost*interval (all 16-hex), cost (decimal).
ALGOS['leaky'] = function(key, a, pos, now, slack)
  local interval = hex(a[pos])
  local horizon = hex(a[pos + 1])
  local drain = hex(a[pos + 2])
  local cost = tonumber(a[pos + 3])
  local raw = state_of(key)
  local start = max(fields(raw, 1)[1], now)
  local wait = sub(start, now)
  local drained_at = add(start, drain)
  if cmp(wait, horizon) <= 0 and not over_u64(drained_at) then
    local backlog = sub(drained_at, now)
    local remaining = ZERO
    if cmp(horizon, backlog) >= 0 then
      remaining = add(div(sub(horizon, backlog), interval), ONE)
    end
    local d = allow(remaining, backlog, wait)
    local write = nil
    if cost > 0 then
      write = function()
        redis.call('SET', key, tohex(drained_at), 'PX', ttl_ms(backlog, slack))
      end
    end
    return d, write, pos + 4
  end
  local retry = U64MAX
  if cmp(wait, horizon) > 0 then retry = sub(wait, horizon) end
  return deny(ZERO, wait, retry), nil, pos + 4
end
