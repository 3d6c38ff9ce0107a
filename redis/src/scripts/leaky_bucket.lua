-- Leaky bucket (shaper): state {F}, the time the queue drains.
-- decide mirrors tollgate_core::LeakyBucket::decide; refund and charge mirror the core's
-- tat::give_back and tat::charge (LeakyBucket::refund / LeakyBucket::charge).
-- Parameters (p[1..4], parsed once per tier spec by the runner): drain interval,
-- horizon = Q/r, cost*interval, cost.
-- (one scope: only what ALGOS holds is seen outside this file)
do
local leaky = { fields = 1, args = 4 }
ALGOS['leaky'] = leaky

function leaky.decide(st, p, now, zero)
  local interval = p[1]
  local horizon = p[2]
  local drain, cost = ZERO, 0
  if not zero then drain, cost = p[3], p[4] end
  local start = max(st[1], now)
  local wait = sub(start, now)
  local drained_at = add(start, drain)
  if cmp(wait, horizon) <= 0 and not over_at(drained_at) then
    local backlog = sub(drained_at, now)
    local remaining = ZERO
    if cmp(horizon, backlog) >= 0 then
      remaining = add(div(sub(horizon, backlog), interval), ONE)
    end
    local next = nil
    if cost > 0 then next = { drained_at } end
    return next, backlog, allow(remaining, backlog, wait)
  end
  local retry = U64MAX
  if cmp(wait, horizon) > 0 then retry = sub(wait, horizon) end
  return nil, nil, deny(ZERO, wait, retry)
end

function leaky.refund(st, p, now)
  return { tat_give_back(st[1], now, p[3]) }
end

function leaky.charge(st, p, now)
  return { tat_charge(st[1], now, p[3], p[4]) }
end
end
