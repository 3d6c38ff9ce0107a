-- GCRA (and the token bucket, which is GCRA with T = 1/r, b = C): state {TAT}.
-- decide mirrors tollgate_core::Gcra::decide; refund and charge mirror the core's
-- tat::give_back and tat::charge (Gcra::refund / Gcra::charge).
-- Arguments (4, each as the prelude's arg() reads it): T, tau = b*T, cost*T, cost.
local gcra = { fields = 1, args = 4 }
ALGOS['gcra'] = gcra

function gcra.decide(st, a, pos, now, zero)
  local interval = arg(a[pos])
  local tolerance = arg(a[pos + 1])
  local cost_t, cost = ZERO, 0
  if not zero then cost_t, cost = arg(a[pos + 2]), arg(a[pos + 3]) end
  local tat = max(st[1], now)
  local new_tat = add(tat, cost_t)
  local fits = not over_at(new_tat)
  local ahead = U64MAX
  if fits then ahead = sub(new_tat, now) end
  if fits and cmp(ahead, tolerance) <= 0 then
    local next = nil
    if cost > 0 then next = { new_tat } end
    return allow(div(sub(tolerance, ahead), interval), ahead), next, ahead
  end
  local current = sub(tat, now)
  local retry = U64MAX
  if fits then retry = sub(ahead, tolerance) end
  return deny(div(sat_sub(tolerance, current), interval), current, retry), nil, nil
end

function gcra.refund(st, a, pos, now)
  return { tat_give_back(st[1], now, arg(a[pos + 2])) }
end

function gcra.charge(st, a, pos, now)
  return { tat_charge(st[1], now, arg(a[pos + 2]), arg(a[pos + 3])) }
end
