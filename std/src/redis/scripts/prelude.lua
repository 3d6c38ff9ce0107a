-- tollgate prelude: exact unsigned integer arithmetic for Redis' Lua 5.1, whose only number
-- type is an IEEE double (53-bit mantissa). Nanosecond instants (~1.8e18 today) and u128
-- intermediates (L*W) do not fit, so every quantity is a little-endian array of NL limbs in
-- base B = 2^24. NL is set by the line the client puts before this file: 3 limbs (72 bits)
-- hold every intermediate of GCRA, leaky bucket, fixed window and log (sums of two u64s,
-- (index+1)*W <= now + W); the sliding window counter's products L*W, prev*(W - e) with
-- L < 2^31 need 5 (120 bits). Every limb operation stays below 2^53 and is therefore exact:
--   add/sub  : limb sums < 2^25
--   mul      : limb products < 2^48, at most NL summed per column (< 2^51), plus carry
--   divmod   : both operands below 2^52: one double division, corrected by one exact
--              multiply-subtract; otherwise a double-precision quotient estimate biased low
--              so that est*b <= r always holds, then an exact multiply-subtract, repeated
--              until r < b (a few rounds: each cuts r by 2^39)
-- Values cross the wire as 16-digit hex strings (u64), parsed and printed exactly.
local B = 16777216
local floor = math.floor

local function small(x)
  -- x: a non-negative integer below 2^53 (exactly representable)
  local t = {}
  for i = 1, NL do
    local q = floor(x / B)
    t[i] = x - q * B
    x = q
  end
  return t
end

local ZERO = small(0)
local ONE = small(1)
local U64MAX = { B - 1, B - 1, 65535 }
for i = 4, NL do U64MAX[i] = 0 end

local function hex(s)
  -- s: exactly 16 hex digits
  local hi = tonumber(string.sub(s, 1, 8), 16)
  local lo = tonumber(string.sub(s, 9, 16), 16)
  local lo_top = floor(lo / B)
  local hi_low = hi % 65536
  local t = { lo - lo_top * B, lo_top + hi_low * 256, (hi - hi_low) / 65536 }
  for i = 4, NL do t[i] = 0 end
  return t
end

local function cmp(a, b)
  for i = NL, 1, -1 do
    local x, y = a[i], b[i]
    if x ~= y then
      if x < y then return -1 else return 1 end
    end
  end
  return 0
end

local function is_zero(a)
  for i = 1, NL do
    if a[i] ~= 0 then return false end
  end
  return true
end

local function over_u64(a)
  if a[3] >= 65536 then return true end
  for i = 4, NL do
    if a[i] ~= 0 then return true end
  end
  return false
end

local function add(a, b)
  local t, c = {}, 0
  for i = 1, NL do
    local s = a[i] + b[i] + c
    if s >= B then t[i] = s - B; c = 1 else t[i] = s; c = 0 end
  end
  return t
end

local function sub(a, b)
  -- requires a >= b
  local t, c = {}, 0
  for i = 1, NL do
    local s = a[i] - b[i] - c
    if s < 0 then t[i] = s + B; c = 1 else t[i] = s; c = 0 end
  end
  return t
end

local function sat_sub(a, b)
  if cmp(a, b) <= 0 then return ZERO end
  return sub(a, b)
end

local function max(a, b)
  if cmp(a, b) >= 0 then return a end
  return b
end

local function min(a, b)
  if cmp(a, b) <= 0 then return a end
  return b
end

local function mul(a, b)
  -- callers guarantee the product fits in NL limbs
  local acc = {}
  for i = 1, NL do acc[i] = 0 end
  for i = 1, NL do
    local x = a[i]
    if x ~= 0 then
      for j = 1, NL - i + 1 do
        acc[i + j - 1] = acc[i + j - 1] + x * b[j]
      end
    end
  end
  local c = 0
  for i = 1, NL do
    local s = acc[i] + c
    c = floor(s / B)
    acc[i] = s - c * B
  end
  return acc
end

local function tonum(a)
  -- nearest-ish double: relative error below 2^-50
  local r = 0
  for i = NL, 1, -1 do r = r * B + a[i] end
  return r
end

local BIAS = 1 - 2 ^ -40

local SMALL = 2 ^ 52

local function divmod(a, b)
  -- b must be non-zero; returns floor(a / b), a mod b
  local ad, bd0 = tonum(a), tonum(b)
  if ad < SMALL and bd0 < SMALL then
    -- Both exact as doubles: q*b <= a + b < 2^53, so the remainder is computed exactly
    -- and one correction step fixes any rounding of the quotient.
    local q = floor(ad / bd0)
    local r = ad - q * bd0
    if r < 0 then q = q - 1; r = r + bd0 elseif r >= bd0 then q = q + 1; r = r - bd0 end
    return small(q), small(r)
  end
  local q, r = ZERO, a
  local bd = tonum(b)
  while cmp(r, b) >= 0 do
    local est = floor(tonum(r) / bd * BIAS)
    if est < 1 then est = 1 end
    local e = small(est)
    q = add(q, e)
    r = sub(r, mul(e, b))
  end
  return q, r
end

local function div(a, b)
  local q = divmod(a, b)
  return q
end

local function clamp_u64(a)
  if over_u64(a) then return U64MAX end
  return a
end

local function tohex(a)
  -- a < 2^64
  local lo = a[1] + (a[2] % 256) * B
  local hi = floor(a[2] / 256) + a[3] * 65536
  return string.format('%08x%08x', hi, lo)
end

-- Nanos::span_to(at, now): at - now, 0 if passed, saturating at u64::MAX.
local function span_to(at, now)
  return clamp_u64(sat_sub(at, now))
end

local NS_PER_SEC = small(1000000000)

local function server_now()
  local t = redis.call('TIME')
  return add(mul(small(tonumber(t[1])), NS_PER_SEC), small(tonumber(t[2]) * 1000))
end

-- Milliseconds of TTL for a state that is fresh again after `reset` ns: rounded up, plus
-- margins for Redis' millisecond expiry clock, plus the configured slack.
local function ttl_ms(reset, slack)
  return floor(tonum(reset) / 1000000) + 3 + slack
end

-- A decision as the core's Decision: allowed, remaining, reset_after, retry_after, delay.
local function allow(remaining, reset, delay)
  return { 1, remaining, reset, ZERO, delay or ZERO }
end

local function deny(remaining, reset, retry)
  -- Decision::deny: a deny always says to wait at least 1 ns
  if is_zero(retry) then retry = ONE end
  return { 0, remaining, reset, retry, ZERO }
end

-- Reads 16-hex-digit fields packed in one string value (nil or missing: all zero).
local function fields(raw, n)
  local t = {}
  for i = 1, n do
    if raw then t[i] = hex(string.sub(raw, 16 * i - 15, 16 * i)) else t[i] = ZERO end
  end
  return t
end

local function state_of(key)
  local raw = redis.call('GET', key)
  if raw == false then return nil end
  return raw
end

local ALGOS = {}
