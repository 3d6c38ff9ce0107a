-- GCRA (and the token bucket, which is GCRA with T = 1/r, b = C): state {TAT}.
-- decide mirrors tollgate_core::Gcra::decide; refund and charge mirror the core's
-- tat::give_back and tat::charge (Gcra::refund / Gcra::charge).
-- Parameters (p[1..4], parsed once per tier spec by the runner): T, tau = b*T, cost*T, cost.
-- decide's `out` (given unless `zero`): a table of the runner's that the number path fills
-- and returns as the next state, instead of making one.
-- (one scope: only what ALGOS holds is seen outside this file)
do
local gcra = { fields = 1, args = 4 }
ALGOS['gcra'] = gcra

function gcra.decide(st, p, now, zero, out)
  local interval = p[1]
  local tolerance = p[2]
  local cost_t, cost = ZERO, 0
  if not zero then cost_t, cost = p[3], p[4] end
  local s = st[1]
  if FAST and p.num and not LIMB[s] then
    -- the number path (see the prelude's FAST): tat >= now >= 0, and below 2^53 new_tat
    -- is not past u64::MAX (fits)
    local tat = s
    if tat < now then tat = now end
    local new_tat = tat + cost_t
    if new_tat < EXACT then
      local ahead = new_tat - now
      if ahead <= tolerance then
        local next = nil
        if cost > 0 then
          next = out
          out[1] = new_tat
        end
        return next, ahead, 1, ndiv(tolerance - ahead, interval), ahead, 0, 0
      end
      -- retry = ahead - tolerance > 0
      local current = tat - now
      local room = tolerance - current
      if room < 0 then room = 0 end
      return nil, nil, 0, ndiv(room, interval), current, ahead - tolerance, 0
    end
  end
  local tat = max(s, now)
  local new_tat = add(tat, cost_t)
  local fits = not over_at(new_tat)
  local ahead = U64MAX
  if fits then ahead = sub(new_tat, now) end
  if fits and cmp(ahead, tolerance) <= 0 then
    local next = nil
    if cost > 0 then next = { new_tat } end
    return next, ahead, allow(div(sub(tolerance, ahead), interval), ahead)
  end
  local current = sub(tat, now)
  local retry = U64MAX
  if fits then retry = sub(ahead, tolerance) end
  return nil, nil, deny(div(sat_sub(tolerance, current), interval), current, retry)
end

function gcra.refund(st, p, now)
  return { tat_give_back(st[1], now, p[3]) }
end

function gcra.charge(st, p, now)
  return { tat_charge(st[1], now, p[3], p[4]) }
end
end
