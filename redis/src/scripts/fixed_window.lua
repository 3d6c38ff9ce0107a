-- Fixed window: state {window index, count}.
-- decide mirrors tollgate_core::FixedWindow::decide; refund and charge mirror
-- FixedWindow::refund and FixedWindow::charge (`p.cmax`: the most the core's packed count
-- holds, where a charge saturates).
-- Parameters (p[1..3], parsed once per tier spec by the runner): W, L, cost.
-- decide's `out` (given unless `zero`): a table of the runner's that the number path fills
-- and returns as the next state, instead of making one.
-- (one scope: only what ALGOS holds is seen outside this file)
do
local fixed = { fields = 2, args = 3 }
ALGOS['fixed'] = fixed

-- Mirrors FixedWindow::current (core/src/fixed_window.rs).
-- The window in force given the stored one: the stored window if it is now's or later (a
-- late caller keeps a window another caller already moved on, as in the core), else now's
-- with count 0. Reads the call's time through window_of (never `now`): returns index,
-- count, and `ahead` = index - now's index (0 but for a late caller), `into` = ns since
-- the start of now's window.
local function fixed_current(st, window)
  local index, count = st[1], st[2]
  local cur, into = window_of(window)
  if cmp(index, cur) < 0 then return cur, ZERO, ZERO, into end
  return index, count, sub(index, cur), into
end
fixed.current = fixed_current

-- decide's number path (FixedWindow::decide on numbers below 2^53, FAST set), also pasted
-- into the store's fused check (inlined as fixed_number): from `st`, `window`, `limit`,
-- `cost` and `out`, sets `next, span, ok, a, b, c, e` as decide returns them; `ok` stays
-- nil where the general steps decide.
--[=[@define fixed_number
local index, count = st[1], st[2]
--@inline window_memo
if not (LIMB[index] or LIMB[count] or LIMB[cur]) then
  local ahead = 0
  if index < cur then index, count = cur, 0 else ahead = index - cur end
  local reset = ahead * window + (window - into)
  local new_count = count + cost
  if reset < EXACT and new_count < EXACT then
    if new_count <= limit then
      if cost ~= 0 then
        next = out
        out[1], out[2] = index, new_count
      end
      span, ok, a, b, c, e = reset, 1, limit - new_count, reset, 0, 0
    else
      -- reset >= W - into >= 1: the deny's retry as it is
      local room = limit - count
      if room < 0 then room = 0 end
      ok, a, b, c, e = 0, room, reset, reset, 0
    end
  end
end
--]=]

function fixed.decide(st, p, now, zero, out)
  local window = p[1]
  local limit = p[2]
  local cost = ZERO
  if not zero then cost = p[3] end
  if FAST and p.num then
    -- the number path (see the prelude's FAST)
    local next, span, ok, a, b, c, e
    --@inline fixed_number
    if ok then return next, span, ok, a, b, c, e end
  end
  local index, count, ahead, into = fixed_current(st, window)
  -- (index+1)*W - now = ahead*W + (W - into), saturating
  local reset = clamp_u64(add(mul(ahead, window), sub(window, into)))
  local new_count = add(count, cost)
  if cmp(new_count, limit) <= 0 then
    local next = nil
    if not is_zero(cost) then next = { index, new_count } end
    return next, reset, allow(sub(limit, new_count), reset)
  end
  -- saturating: a count above a lowered limit must not underflow (the core subtracts
  -- plainly there, which can only happen after a limit was lowered under a live key)
  return nil, nil, deny(sat_sub(limit, count), reset, reset)
end

function fixed.refund(st, p, now)
  if cmp(st[1], (window_of(p[1]))) == 0 then
    return { st[1], sat_sub(st[2], p[3]) }
  end
  return st
end

function fixed.charge(st, p, now)
  local cost = p[3]
  if is_zero(cost) then return st end
  local index, count = fixed_current(st, p[1])
  return { index, min(add(count, cost), p.cmax) }
end
end
