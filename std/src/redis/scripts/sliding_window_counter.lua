-- Sliding window counter: state (window index, prev, curr) as three 16-hex fields.
-- Mirrors tollgate_core::SlidingWindowCounter::decide, including its u128 products
-- (prev*(W - elapsed), L*W, x*W), which five 24-bit limbs (120 bits) hold exactly.
-- Arguments (3): W, L, cost (all 16-hex).
ALGOS['swc'] = function(key, a, pos, now, slack)
  local window = hex(a[pos])
  local limit = hex(a[pos + 1])
  local cost = hex(a[pos + 2])
  local raw = state_of(key)
  local st = fields(raw, 3)
  local stored, prev, curr = st[1], st[2], st[3]
  local current = div(now, window)
  local index, elapsed
  if cmp(stored, current) >= 0 then
    index = stored
    if cmp(stored, current) == 0 then
      elapsed = sub(now, mul(current, window))
    else
      elapsed = ZERO
    end
  else
    if cmp(add(stored, ONE), current) == 0 then prev = curr else prev = ZERO end
    curr = ZERO
    index = current
    elapsed = sub(now, mul(current, window))
  end
  local weighted = mul(prev, sub(window, elapsed))
  local capacity = mul(limit, window)
  local function remaining(c)
    return sat_sub(div(sat_sub(capacity, weighted), window), c)
  end
  local function until_window(k)
    return span_to(mul(add(index, small(k)), window), now)
  end
  local new_curr = add(curr, cost)
  if cmp(add(weighted, mul(new_curr, window)), capacity) <= 0 then
    local reset = ZERO
    if not is_zero(new_curr) then
      reset = until_window(2)
    elseif not is_zero(weighted) then
      reset = until_window(1)
    end
    local d = allow(remaining(new_curr), reset)
    local write = nil
    if not is_zero(cost) then
      write = function()
        redis.call('SET', key, tohex(index) .. tohex(prev) .. tohex(new_curr), 'PX',
          ttl_ms(reset, slack))
      end
    end
    return d, write, pos + 3
  end
  local reset
  if not is_zero(curr) then reset = until_window(2) else reset = until_window(1) end
  -- retry_after: the offset into window index+k from which prev*(W - e) <= x*W holds
  local function earliest(x, p)
    if is_zero(p) then return ZERO end
    return sub(window, min(div(mul(x, window), p), window))
  end
  local k, offset
  local used = add(curr, cost)
  if cmp(limit, used) >= 0 then
    k, offset = 0, earliest(sub(limit, used), prev)
  else
    k, offset = 1, earliest(sub(limit, cost), curr)
  end
  local at = add(mul(add(index, small(k)), window), offset)
  return deny(remaining(curr), reset, span_to(at, now)), nil, pos + 3
end
