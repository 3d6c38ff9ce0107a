-- Sliding window log: a sorted set of admitted permits, one member per permit. The
-- permits have score 0 and are named hex(stamp) .. hex(sequence), so the set's order is
-- (stamp, sequence): stamps are recorded at max(now, newest) and never decrease, so that is
-- also recording order and rank r holds permit number h - n + r, exactly like
-- tollgate_core::LogRing's live slots. A runner reads the set through a view
-- { n = permits, stamp_at = function(view, rank), next_seq = function(view) }, called as
-- methods (see the runners).
-- decide mirrors tollgate_core::SlidingWindowLog::decide (the pure log transition every
-- executor runs) and returns the record to append ({ stamp, count }); count over the
-- newest `ceiling` mirrors SlidingWindowLog::used (what rescale_from keeps of a log of
-- other parameters), and its rank, capped at n - L, SlidingWindowLog::droppable (what a
-- write drops: see write_log in store.lua); refund
-- returns how many of the newest permits to remove (SlidingWindowLog::refund) and charge
-- the record to append (SlidingWindowLog::charge). A log keeps up to its ceiling L + 4096
-- permits (SlidingWindowLog::ceiling: `p.cmax` of the tier's spec, ceiling() of a stored
-- tag's L), also beyond its limit (charges, conversions, a lowered limit), so a rollback
-- finds every permit used.
-- Parameters (p[1..3], parsed once per tier spec by the runner): W, L, cost.
-- (one scope: only what ALGOS holds is seen outside this file)
do
local log = { fields = 0, args = 3 }
ALGOS['log'] = log

-- tollgate_core::SlidingWindowLog::EXCESS
local LOG_EXCESS = 4096

-- SlidingWindowLog::ceiling of a log of limit `limit_n` (a number: the policy's log limits
-- are at most 65 536)
function log.ceiling(limit_n)
  return limit_n + LOG_EXCESS
end

-- The live permits are the newest min(n, within) (within = L for a decision, the ceiling
-- for used / droppable); binary search among them for the oldest one still in the window.
-- Returns the count in the window and the rank of the oldest of them.
local function log_count(view, window, limit_n, now)
  local in_window_from = nil
  if cmp(now, window) >= 0 then in_window_from = sub(now, window) end
  local n = view.n
  local lo, hi = n - math.min(n, limit_n), n
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    local t = view:stamp_at(mid)
    if in_window_from == nil or cmp(t, in_window_from) > 0 then hi = mid else lo = mid + 1 end
  end
  return n - lo, lo
end
log.count = log_count

-- Time until a permit stamped `t` leaves the window.
local function until_out(t, window, now)
  return span_to(add(t, window), now)
end

function log.decide(view, p, now, zero)
  local window = p[1]
  local limit_n = p[2]
  local cost = 0
  if not zero then cost = p[3] end
  local n = view.n
  local count, first = log_count(view, window, limit_n, now)
  -- the search covered every entry: what write_log needs to know what it drops (`first`,
  -- the rank of the oldest in the window among them all)
  if n <= limit_n then view.first = first end
  local newest = nil
  if n > 0 then newest = view:stamp_at(n - 1) end
  if count + cost <= limit_n then
    local stamp = now
    if newest then stamp = max(newest, now) end
    local reset = ZERO
    if cost > 0 then
      reset = until_out(stamp, window, now)
    elseif newest then
      reset = until_out(newest, window, now)
    end
    local record = nil
    if cost > 0 then record = { stamp, cost } end
    return record, reset, allow(small(limit_n - count - cost), reset)
  end
  local reset = ZERO
  if newest then reset = until_out(newest, window, now) end
  local retry = reset
  local blocking = n + cost - limit_n - 1
  if blocking >= n - math.min(n, limit_n) then retry = until_out(view:stamp_at(blocking), window, now) end
  return nil, nil, deny(small(limit_n - count), reset, retry)
end

function log.refund(view, p, now)
  local count = log_count(view, p[1], p.cmax, now)
  return math.min(count, p[3])
end

function log.charge(view, p, now)
  local stamp = now
  if view.n > 0 then stamp = max(view:stamp_at(view.n - 1), now) end
  return { stamp, math.min(p[3], p.cmax) }
end
end
