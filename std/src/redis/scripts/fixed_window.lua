-- Fixed window: state (window index, count) as two 16-hex fields in one string.
-- Mirrors tollgate_core::FixedWindow::decide. Arguments (3): W, L, cost (all 16-hex).
-- (index+1)*W - now is computed as index*W + W - now.
ALGOS['fixed'] = function(key, a, pos, now, slack)
  local window = hex(a[pos])
  local limit = hex(a[pos + 1])
  local cost = hex(a[pos + 2])
  local raw = state_of(key)
  local st = fields(raw, 2)
  local index, count = st[1], st[2]
  -- now's window is the stored one whenever stored*W <= now < stored*W + W (no division);
  -- a stored window after now's (a late caller) is kept, as in the core
  local base = mul(index, window)
  if cmp(now, base) >= 0 and cmp(sub(now, base), window) >= 0 then
    index = div(now, window)
    base = mul(index, window)
    count = ZERO
  end
  local reset = span_to(add(base, window), now)
  local new_count = add(count, cost)
  if cmp(new_count, limit) <= 0 then
    local d = allow(sub(limit, new_count), reset)
    local write = nil
    if not is_zero(cost) then
      write = function()
        redis.call('SET', key, tohex(index) .. tohex(new_count), 'PX', ttl_ms(reset, slack))
      end
    end
    return d, write, pos + 3
  end
  -- saturating: a count above a lowered limit must not underflow (the core subtracts
  -- plainly there, which can only happen after a limit was lowered under a live key)
  return deny(sat_sub(limit, count), reset, reset), nil, pos + 3
end
