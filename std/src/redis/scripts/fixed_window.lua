-- Fixed window: state {window index, count}.
-- decide mirrors tollgate_core::FixedWindow::decide; refund and charge mirror
-- FixedWindow::refund and FixedWindow::charge (`cmax`: the most the core's packed count
-- holds, where a charge saturates). (index+1)*W - now is computed as index*W + W - now.
-- Arguments (3): W, L, cost (all 16-hex).
local fixed = { fields = 2, args = 3 }
ALGOS['fixed'] = fixed

-- The window of `now` given the stored one: the stored window whenever
-- stored*W <= now < stored*W + W (no division); a stored window after now's (a late
-- caller) is kept, as in the core. Returns index, index*W, count.
local function fixed_current(st, window, now)
  local index, count = st[1], st[2]
  local base = mul(index, window)
  if cmp(now, base) >= 0 and cmp(sub(now, base), window) >= 0 then
    index = div(now, window)
    base = mul(index, window)
    count = ZERO
  end
  return index, base, count
end
fixed.current = fixed_current

function fixed.decide(st, a, pos, now, zero)
  local window = hex(a[pos])
  local limit = hex(a[pos + 1])
  local cost = ZERO
  if not zero then cost = hex(a[pos + 2]) end
  local index, base, count = fixed_current(st, window, now)
  local reset = span_to(add(base, window), now)
  local new_count = add(count, cost)
  if cmp(new_count, limit) <= 0 then
    local next = nil
    if not is_zero(cost) then next = { index, new_count } end
    return allow(sub(limit, new_count), reset), next, reset
  end
  -- saturating: a count above a lowered limit must not underflow (the core subtracts
  -- plainly there, which can only happen after a limit was lowered under a live key)
  return deny(sat_sub(limit, count), reset, reset), nil, nil
end

function fixed.refund(st, a, pos, now)
  local window = hex(a[pos])
  if cmp(st[1], div(now, window)) == 0 then
    return { st[1], sat_sub(st[2], hex(a[pos + 2])) }
  end
  return st
end

function fixed.charge(st, a, pos, now, cmax)
  local cost = hex(a[pos + 2])
  if is_zero(cost) then return st end
  local index, _, count = fixed_current(st, hex(a[pos]), now)
  return { index, min(add(count, cost), cmax) }
end
