-- GCRA (and the token bucket, which is GCRA with T = 1/r, b = C): state TAT in one string.
-- Mirrors tollgate_core::Gcra::decide. Arguments (5): T, tau = b*T, cost*T (all 16-hex),
-- cost (decimal).
ALGOS['gcra'] = function(key, a, pos, now, slack)
  local interval = hex(a[pos])
  local tolerance = hex(a[pos + 1])
  local cost_t = hex(a[pos + 2])
  local cost = tonumber(a[pos + 3])
  local raw = state_of(key)
  local tat = max(fields(raw, 1)[1], now)
  local new_tat = add(tat, cost_t)
  local fits = not over_u64(new_tat)
  local ahead = U64MAX
  if fits then ahead = sub(new_tat, now) end
  if fits and cmp(ahead, tolerance) <= 0 then
    local d = allow(div(sub(tolerance, ahead), interval), ahead)
    local write = nil
    if cost > 0 then
      write = function()
        redis.call('SET', key, tohex(new_tat), 'PX', ttl_ms(ahead, slack))
      end
    end
    return d, write, pos + 4
  end
  local current = sub(tat, now)
  local retry = U64MAX
  if fits then retry = sub(ahead, tolerance) end
  return deny(div(sat_sub(tolerance, current), interval), current, retry), nil, pos + 4
end
