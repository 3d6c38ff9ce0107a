-- Sliding window counter: state {window index, prev, curr}.
-- Gives exactly tollgate_core::SlidingWindowCounter::decide's decisions, with its u128
-- arithmetic rearranged so that the common case needs no u128 division:
--   * the window index of `now` and the time into it come from window_of (a division by
--     W only when the time enters another window), never from `now` itself;
--   * with prev <= L (always, unless the limit was lowered under a live key),
--     floor((L*W - prev*(W - e)) / W) = (L - prev) + floor(prev*e / W) exactly, since
--     L*W - prev*(W - e) = (L - prev)*W + prev*e; call it `room`. The core's admission
--     test weighted + new*W <= L*W is then new <= room (an integer is at most a real iff
--     it is at most its floor), and its `remaining` is room - new;
--   * otherwise (prev > L) the core's formulas are used as they are, in 96-bit limbs;
--   * (index + k)*W - now is (index - cur + k - 1)*W + (W - into), cur being now's window
--     and `into` the ns since its start; W - min(floor(x*W/p), W) is 0 when x >= p.
-- refund, charge and used mirror SlidingWindowCounter::refund / charge / used (`p.cmax`:
-- the most the core's packed counts hold, where a charge saturates).
-- Parameters (p[1..3], parsed once per tier spec by the runner): W, L, cost.
-- decide's `out` (given unless `zero`): a table of the runner's that the number path fills
-- and returns as the next state, instead of making one.
-- (one scope: only what ALGOS holds is seen outside this file)
do
local swc = { fields = 3, args = 3 }
ALGOS['swc'] = swc

-- The core's `roll`: the state moved to now's window. Returns index, prev, curr, elapsed
-- (ns into now's window; 0 for a stored window after now's), and for the spans: `ahead` =
-- index - now's index (0 but for a late caller) and `into` = ns into now's window.
local function swc_roll(st, window)
  local stored, prev, curr = st[1], st[2], st[3]
  local cur, into = window_of(window)
  local c = cmp(stored, cur)
  if c == 0 then return stored, prev, curr, into, ZERO, into end
  if c > 0 then return stored, prev, curr, ZERO, sub(stored, cur), into end
  if cmp(add(stored, ONE), cur) == 0 then prev = curr else prev = ZERO end
  return cur, prev, ZERO, into, ZERO, into
end
swc.roll = swc_roll

-- Mirrors until_window (core/src/window.rs).
-- (index + k)*W - now for k >= 1, where index = now's window + ahead and `into` is the
-- offset into now's window: never negative, saturating.
local function until_window(ahead, k, window, into)
  return clamp_u64(add(mul(add(ahead, k - 1), window), sub(window, into)))
end

-- retry_after: the offset into a window from which p*(W - e) <= x*W holds.
local function earliest(x, p, window)
  if is_zero(p) or cmp(x, p) >= 0 then return ZERO end
  return sub(window, div(mul(x, window), p))
end

-- decide's number path to an admission with prev <= L (SlidingWindowCounter::decide on
-- numbers below 2^53, FAST set), also pasted into the store's fused check (inlined as
-- swc_number): from `st`, `window`, `limit`, `cost` and `out`, sets `next, span, ok, a,
-- b, c, e` as decide returns them; `ok` stays nil where the general steps decide.
--[=[@define swc_number
local index, prev, curr = st[1], st[2], st[3]
--@inline window_memo
if not (LIMB[index] or LIMB[prev] or LIMB[curr] or LIMB[cur]) then
  -- swc_roll
  local elapsed, ahead = into, 0
  if index > cur then
    elapsed, ahead = 0, index - cur
  elseif index < cur then
    if index + 1 == cur then prev = curr else prev = 0 end
    index, curr = cur, 0
  end
  local weighed = prev * elapsed
  if prev <= limit and weighed < SMALL then
    -- ndiv(weighed, window), its first case (0 below the divisor) without the call
    local room = limit - prev
    if weighed >= window then room = room + ndiv(weighed, window) end
    local new_curr = curr + cost
    if new_curr <= room then
      -- until_window(ahead, 2 or 1, window, into)
      local reset = 0
      if new_curr ~= 0 then
        reset = (ahead + 1) * window + (window - into)
      elseif prev ~= 0 then
        reset = ahead * window + (window - into)
      end
      if reset < EXACT then
        if cost ~= 0 then
          next = out
          out[1], out[2], out[3] = index, prev, new_curr
        end
        span, ok, a, b, c, e = reset, 1, room - new_curr, reset, 0, 0
      end
    end
  end
end
--]=]

function swc.decide(st, p, now, zero, out)
  local window = p[1]
  local limit = p[2]
  local cost = ZERO
  if not zero then cost = p[3] end
  if FAST and p.num then
    -- the number path (see the prelude's FAST) of an admission with prev <= L; anything
    -- else takes the general steps
    local next, span, ok, a, b, c, e
    --@inline swc_number
    if ok then return next, span, ok, a, b, c, e end
  end
  local index, prev, curr, elapsed, ahead, into = swc_roll(st, window)
  -- elapsed < W here, so the previous window weighs prev*(W - e) > 0 iff prev > 0
  local room, over = nil, false
  if cmp(prev, limit) <= 0 then
    room = add(sub(limit, prev), div(mul(prev, elapsed), window))
  else
    local capacity = mul(limit, window)
    local weighted = mul(prev, sub(window, elapsed))
    over = cmp(weighted, capacity) > 0
    room = div(sat_sub(capacity, weighted), window)
  end
  local new_curr = add(curr, cost)
  if not over and cmp(new_curr, room) <= 0 then
    local reset = ZERO
    if not is_zero(new_curr) then
      reset = until_window(ahead, 2, window, into)
    elseif not is_zero(prev) then
      reset = until_window(ahead, 1, window, into)
    end
    local next = nil
    if not is_zero(cost) then next = { index, prev, new_curr } end
    return next, reset, allow(sub(room, new_curr), reset)
  end
  local reset
  if not is_zero(curr) then
    reset = until_window(ahead, 2, window, into)
  else
    reset = until_window(ahead, 1, window, into)
  end
  local k, offset
  local used = add(curr, cost)
  if cmp(limit, used) >= 0 then
    k, offset = 0, earliest(sub(limit, used), prev, window)
  else
    k, offset = 1, earliest(sub(limit, cost), curr, window)
  end
  -- (index + k)*W + offset - now, 0 if passed, saturating
  local retry = clamp_u64(sat_sub(add(mul(add(ahead, k), window), offset), into))
  return nil, nil, deny(sat_sub(room, curr), reset, retry)
end

function swc.refund(st, p, now)
  local cost = p[3]
  local index = window_of(p[1])
  if cmp(st[1], index) == 0 then return { st[1], st[2], sat_sub(st[3], cost) } end
  if cmp(st[1], add(index, ONE)) == 0 then return { st[1], sat_sub(st[2], cost), st[3] } end
  return st
end

function swc.charge(st, p, now)
  local cost = p[3]
  if is_zero(cost) then return st end
  local index, prev, curr = swc_roll(st, p[1])
  return { index, prev, min(add(curr, cost), p.cmax) }
end
end
