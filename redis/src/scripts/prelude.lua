-- tollgate prelude: exact unsigned integer arithmetic for Redis' Lua 5.1, whose only number
-- type is an IEEE double (53-bit mantissa). Nanosecond instants (~1.8e18 today) and u128
-- intermediates (L*W) do not fit in it exactly, so a value is one of two things:
--   * a Lua number, when it is an integer below 2^53 (exact): counts, durations, params;
--   * a little-endian array of NL limbs in base B = 2^24, only for values of 2^53 and more
--     (absolute instants, u128 products). Every operation normalises its result, so a
--     limb array always means ">= 2^53" and a number always means "< 2^53".
-- Numbers take the fast path (one double operation, kept only when the result is provably
-- exact); anything else goes through the limb routines. NL is set by the line the client
-- puts before this file: 3 limbs (72 bits) hold every intermediate of GCRA, leaky bucket,
-- fixed window and log (sums of two u64s, (index+1)*W <= now + W); the sliding window
-- counter's products of a count (< 2^31) and a duration (< 2^64) need 4 (96 bits). Every limb
-- operation stays below 2^53 and is therefore exact:
--   add/sub  : limb sums < 2^25
--   mul      : limb products < 2^48, at most NL summed per column (< 2^51), plus carry
--   divmod   : a double-precision quotient estimate biased low so that est*b <= r always
--              holds, then an exact multiply-subtract, repeated until r < b (each round
--              cuts r by 2^39)
-- Values cross the wire as 16-digit hex strings (u64), parsed and printed exactly.
local B = 16777216
local B2 = 281474976710656 -- 2^48
local EXACT = 9007199254740992 -- 2^53
local SMALL = 4503599627370496 -- 2^52
local TWO32 = 4294967296
-- 2^20: two instants whose high 32-bit halves differ by less are less than 2^52 ns apart,
-- so their difference (high difference * 2^32 + low difference) is exact in a double.
local HI_SPAN = 1048576 --@const
-- 2^32 - 2^21: a call's time whose high half is below it leaves 2^53 ns below the end of
-- u64 time, so relative instants up to 2^52 ahead stay exact (see ROOMY).
local ROOMY_HI = 4292870144 --@const
-- The globals the prelude uses, as locals. A function library's top level (run by
-- FUNCTION LOAD) may not read globals, only its functions when called: the runner's `main`
-- calls bind() on first use (`globals` is defined before the locals that shadow them).
local function globals()
  return math.floor, type, tonumber, string.sub, string.format, string.gmatch, setmetatable,
    string.find
end
local floor, type, tonumber, strsub, format, gmatch, find
local WIDE -- see hex_at

-- Limb arrays are created by a constructor of six slots (NL <= 6): Lua 5.1 then sizes the
-- array part once, instead of growing (and rehashing) it slot by slot. Each is a key of
-- LIMB (weak keys, so it does not keep them alive): `LIMB[x]` tells a limb array from a
-- number in one table lookup, where `type(x) == 'number'` is a C call that also interns its
-- result (many times the cost, in every arithmetic helper).
local LIMB = {}
local function mark(t)
  LIMB[t] = true
  return t
end

local function bind()
  local setmeta
  floor, type, tonumber, strsub, format, gmatch, setmeta, find = globals()
  setmeta(LIMB, { __mode = 'k' })
  WIDE = tonumber('fffffffffffff', 16) == 4503599627370495
end

-- Limb routines (L_*): arrays in, arrays out.

local function limbs(x)
  -- a value as limbs; a number must be a non-negative integer (any size a double holds)
  if LIMB[x] then return x end
  local t = mark({ 0, 0, 0, 0, 0, 0 })
  for i = 1, NL do
    local q = floor(x / B)
    t[i] = x - q * B
    x = q
  end
  return t
end

local function norm(t)
  -- limbs back to a number when below 2^53 (t[3] < 32: t[3] * 2^48 < 2^53)
  for i = 4, NL do
    if t[i] ~= 0 then return t end
  end
  if t[3] < 32 then return t[1] + t[2] * B + t[3] * B2 end
  return t
end

local function L_cmp(a, b)
  for i = NL, 1, -1 do
    local x, y = a[i], b[i]
    if x ~= y then
      if x < y then return -1 else return 1 end
    end
  end
  return 0
end

local function L_add(a, b)
  local t, c = mark({ 0, 0, 0, 0, 0, 0 }), 0
  for i = 1, NL do
    local s = a[i] + b[i] + c
    if s >= B then t[i] = s - B; c = 1 else t[i] = s; c = 0 end
  end
  return t
end

local function L_sub(a, b)
  -- requires a >= b
  local t, c = mark({ 0, 0, 0, 0, 0, 0 }), 0
  for i = 1, NL do
    local s = a[i] - b[i] - c
    if s < 0 then t[i] = s + B; c = 1 else t[i] = s; c = 0 end
  end
  return t
end

local function L_mul(a, b)
  -- callers guarantee the product fits in NL limbs
  local acc = mark({ 0, 0, 0, 0, 0, 0 })
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

local function L_tonum(a)
  -- nearest-ish double: relative error below 2^-50
  local r = 0
  for i = NL, 1, -1 do r = r * B + a[i] end
  return r
end

local BIAS = 1 - 2 ^ -40

local function L_divmod(a, b)
  -- b non-zero; floor(a / b) and a mod b, as limbs
  local q, r = limbs(0), a
  local bd = L_tonum(b)
  while L_cmp(r, b) >= 0 do
    local est = floor(L_tonum(r) / bd * BIAS)
    if est < 1 then est = 1 end
    local e = limbs(est)
    q = L_add(q, e)
    r = L_sub(r, L_mul(e, b))
  end
  return q, r
end

-- Values: numbers below 2^53 or normalised limb arrays.

local function small(x)
  -- a non-negative integer below 2^53, already a value
  return x
end

local ZERO = 0
local ONE = 1
local U64MAX = mark({ B - 1, B - 1, 65535, 0, 0, 0 })

local function from_halves(hi, lo)
  -- hi·2^32 + lo as a value (hi, lo < 2^32)
  if hi < 2097152 then return hi * TWO32 + lo end -- below 2^53
  local lo_top = floor(lo / B)
  local hi_low = hi % 65536
  return mark({ lo - lo_top * B, lo_top + hi_low * 256, (hi - hi_low) / 65536, 0, 0, 0 })
end

local function hex(s)
  -- s: exactly 16 hex digits
  return from_halves(tonumber(strsub(s, 1, 8), 16), tonumber(strsub(s, 9, 16), 16))
end

-- The 16 hex digits of `s` from position `i`, as a value. Where C's unsigned long has 64
-- bits (WIDE, checked once), one tonumber reads them: exact below 2^53, and 2^53 or more
-- (rounded) otherwise, which then reads again exactly by halves.
local function hex_at(s, i)
  if WIDE then
    local v = tonumber(strsub(s, i, i + 15), 16)
    if v < EXACT then return v end
  end
  return from_halves(tonumber(strsub(s, i, i + 7), 16), tonumber(strsub(s, i + 8, i + 15), 16))
end

-- The values of the 16-hex-digit strings hex_field read last (at most 256, a pure cache):
-- a window state's index is the same in every key, its counts small and repeating. A read
-- looks the string up first (`HEXV[h] or hex_field(h)`), and only a miss parses it.
local HEXV, HEXV_COUNT = {}, 0

local function hex_field(h)
  local v
  if WIDE then v = tonumber(h, 16) end
  if v == nil or v >= EXACT then
    return from_halves(tonumber(strsub(h, 1, 8), 16), tonumber(strsub(h, 9, 16), 16))
  end
  if HEXV_COUNT >= 256 then HEXV, HEXV_COUNT = {}, 0 end
  HEXV[h] = v
  HEXV_COUNT = HEXV_COUNT + 1
  return v
end

-- An algorithm argument: hex without padding when below 2^52 (at most 13 digits), else 16
-- hex digits (the client's encoding, args.rs `arg`).
local function arg(s)
  if #s < 16 then return tonumber(s, 16) end
  return hex(s)
end

local function cmp(a, b)
  local na, nb = not LIMB[a], not LIMB[b]
  if na and nb then
    if a < b then return -1 elseif a > b then return 1 else return 0 end
  end
  if na then return -1 end
  if nb then return 1 end
  return L_cmp(a, b)
end

local function is_zero(a)
  return a == 0
end

local function over_u64(a)
  if not LIMB[a] then return false end
  if a[3] >= 65536 then return true end
  for i = 4, NL do
    if a[i] ~= 0 then return true end
  end
  return false
end

local function add(a, b)
  if not LIMB[a] and not LIMB[b] then
    -- a rounded sum below 2^53 is exact (a true sum of 2^53 or more never rounds below)
    local s = a + b
    if s < EXACT then return s end
  end
  return norm(L_add(limbs(a), limbs(b)))
end

local function sub(a, b)
  -- requires a >= b
  if not LIMB[a] then return a - b end
  return norm(L_sub(a, limbs(b)))
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
  if not LIMB[a] and not LIMB[b] then
    local p = a * b
    if p < EXACT then return p end
  end
  return norm(L_mul(limbs(a), limbs(b)))
end

local function tonum(a)
  if not LIMB[a] then return a end
  return L_tonum(a)
end

local function divmod(a, b)
  -- b must be non-zero; returns floor(a / b), a mod b
  if not LIMB[a] and not LIMB[b] and a < SMALL then
    -- a < 2^52 and b <= a (else q = 0): q*b <= a + b < 2^53, so the remainder is exact
    -- and one correction step fixes any rounding of the quotient.
    if a < b then return 0, a end
    local q = floor(a / b)
    local r = a - q * b
    if r < 0 then q = q - 1; r = r + b elseif r >= b then q = q + 1; r = r - b end
    return q, r
  end
  if LIMB[b] and not LIMB[a] then return 0, a end
  local q, r = L_divmod(limbs(a), limbs(b))
  return norm(q), norm(r)
end

local function div(a, b)
  local q = divmod(a, b)
  return q
end

-- div for numbers, a < 2^52 and b >= 1: divmod's first branch, for the algorithms' number
-- paths (see FAST). x - x % 1 is floor(x) for a double x >= 0 (x % 1 = x - floor(x) is
-- exact there), without math.floor's C call.
local function ndiv(a, b)
  if a < b then return 0 end
  local q = a / b
  q = q - q % 1
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

local function clamp_u64(a)
  if over_u64(a) then return U64MAX end
  return a
end

-- Hex output. HEX2, the two hex digits of each byte, is built from the eighth call of a
-- loaded library on (so the EVAL fallback, which runs these definitions per call, never
-- builds it): then 8 digits are four lookups, not a format (a C call several times the
-- cost).
local HEX2, HEX2_CALLS = nil, 0

local function hex8(x)
  -- x < 2^32 as 8 hex digits
  if x == 0 then return '00000000' end
  if HEX2 == nil then
    HEX2_CALLS = HEX2_CALLS + 1
    if HEX2_CALLS < 8 then return format('%08x', x) end
    HEX2 = {}
    for b = 0, 255 do HEX2[b] = format('%02x', b) end
  end
  local d = x % 256
  x = (x - d) / 256
  local c = x % 256
  x = (x - c) / 256
  local b = x % 256
  return HEX2[(x - b) / 256] .. HEX2[b] .. HEX2[c] .. HEX2[d]
end

-- The 16 digits of the numbers tohex printed last (at most 1024, a pure cache): a state's
-- window index and small counts repeat from key to key.
local HEXN, HEXN_COUNT = {}, 0

local function tohex(a)
  -- a < 2^64
  local hi, lo
  if not LIMB[a] then
    local h = HEXN[a]
    if h then return h end
    hi = floor(a / TWO32)
    lo = a - hi * TWO32
    h = hex8(hi) .. hex8(lo)
    if HEXN_COUNT >= 1024 then HEXN, HEXN_COUNT = {}, 0 end
    HEXN[a] = h
    HEXN_COUNT = HEXN_COUNT + 1
    return h
  end
  lo = a[1] + (a[2] % 256) * B
  hi = floor(a[2] / 256) + a[3] * 65536
  return hex8(hi) .. hex8(lo)
end

-- Nanos::span_to(at, now): at - now, 0 if passed, saturating at u64::MAX.
local function span_to(at, now)
  return clamp_u64(sat_sub(at, now))
end

-- The server's TIME in ns, s·10^9 + µs·1000, as its high and low 32 bits (Lua 5.1 reads a
-- decimal string with strtod, base 10 given or not; reading the µs by their bytes instead
-- saved ~140 instructions in the harness, too little to keep). With
-- s = sh·2^16 + sl (s < 2^32): s·10^9 = (sh·10^9)·2^16 + sl·10^9, each product below 2^46,
-- so every step is exact in a double.
-- The library keeps the last second's string and its part of the sum (a pure cache: the
-- seconds change once a second, the µs every call), and the seconds in µs, s·10^6 (below
-- 2^53 while s < 2^32), for the call's deadline. The runner's `main` reads it, inline.
local TIME_S, TIME_HI, TIME_LO, TIME_US = nil, 0, 0, 0

-- 16 hex digits as their high and low 32 bits.
local function halves(s)
  return tonumber(strsub(s, 1, 8), 16), tonumber(strsub(s, 9, 16), 16)
end

-- The call's time. Algorithms take `now` as an argument and never read these; the runner
-- and the helpers below do. NOW_ABS is the absolute time (a value), NOW_H / NOW_L its high
-- and low 32 bits (numbers). In *relative* mode (whenever no log tier takes part) every
-- instant an algorithm sees is `instant - NOW_ABS`, a number while their high 32-bit
-- halves differ by less than 2^20 (|instant - now| < 2^52 + 2^32: about 52 days), so that
-- `now` is 0 and GCRA / leaky bucket arithmetic never touches limbs; absolute mode (a log
-- tier) passes instants as they are. Instants cross in and out through inst() and
-- inst_hex().
local NOW_ABS, NOW_H, NOW_L = 0, 0, 0
local RELATIVE = false
local ROOMY = true -- NOW_ABS <= U64MAX - 2^53: a relative number can never pass U64MAX
-- The absolute instant 0 (a fresh GCRA / leaky state, "any time not after now"): 0 in
-- absolute mode, -2^53 in relative mode, below every relative instant inst() returns.
local EPOCH = 0
-- Set when inst() meets an instant it cannot hold as a relative number (about 52 days or
-- more in the past; further ahead it is a limb value): the runner then reloads in absolute
-- mode.
local FAR = false
-- The call's time is a number (relative mode, or NOW_ABS below 2^53) and no instant that is a
-- number (below 2^53) can be past u64::MAX (absolute mode, or relative and ROOMY): then an
-- algorithm may take its *number path*, the same steps in plain double arithmetic while
-- every value is a number and each sum or product that could reach 2^53 is checked below it
-- (a rounded result below 2^53 is exact), falling back to the general steps otherwise. A
-- spec's `num` says its parameters are numbers below 2^52.
local FAST = false

-- NOW_ABS, built on first use in relative mode (it is a limb array).
local function now_abs()
  if NOW_ABS == nil then NOW_ABS = from_halves(NOW_H, NOW_L) end
  return NOW_ABS
end

-- Sets the call's time from its high and low 32 bits, and the mode.
local function set_now(hi, lo, relative)
  NOW_H, NOW_L = hi, lo
  NOW_ABS = nil
  if not relative then NOW_ABS = from_halves(hi, lo) end
  RELATIVE = relative
  ROOMY = NOW_H < ROOMY_HI
  if relative then EPOCH = -EXACT else EPOCH = 0 end
  FAR = false
  FAST = relative and ROOMY or not relative and not LIMB[NOW_ABS]
end

-- A stored instant (the 16 hex digits of `s` from position `i`) as the mode sees it.
local INST_HS, INST_HI = nil, 0 -- the last high half read, and its value (a pure cache)

local function inst(s, i)
  if not RELATIVE then return hex_at(s, i) end
  -- the high 8 digits change every 4.3 s: a string equal to the last ones is read as they were
  local hs = strsub(s, i, i + 7)
  local hi = INST_HI
  if hs ~= INST_HS then
    hi = tonumber(hs, 16)
    INST_HS, INST_HI = hs, hi
  end
  local lo = tonumber(strsub(s, i + 8, i + 15), 16)
  local dh = hi - NOW_H
  if dh > -HI_SPAN and dh < HI_SPAN then return dh * TWO32 + (lo - NOW_L) end -- |d| < 2^53
  if dh > 0 then return sub(from_halves(hi, lo), now_abs()) end
  if hi == 0 and lo == 0 then return EPOCH end
  FAR = true
  return EPOCH
end

-- `prefix` and an instant as the mode sees it, written as 16 hex digits of its absolute value. The high
-- 8 digits change every 4.3 s: the library keeps the last ones (a pure cache).
local HI_NUM, HI_HEX = -1, ''

local function inst_hex(prefix, v)
  if not RELATIVE then return prefix .. tohex(v) end
  if LIMB[v] then return prefix .. tohex(add(now_abs(), v)) end
  if v <= EPOCH then return prefix .. '0000000000000000' end
  local vh = v / TWO32
  if v >= 0 then vh = vh - vh % 1 else vh = floor(vh) end -- floor (see ndiv)
  local lo = NOW_L + (v - vh * TWO32)
  local hi = NOW_H + vh
  if lo >= TWO32 then lo = lo - TWO32; hi = hi + 1 end
  if hi ~= HI_NUM then HI_NUM, HI_HEX = hi, format('%08x', hi) end
  if HEX2 == nil then return prefix .. HI_HEX .. hex8(lo) end
  -- hex8(lo), in the one concatenation
  local d = lo % 256
  lo = (lo - d) / 256
  local c = lo % 256
  lo = (lo - c) / 256
  local b = lo % 256
  return prefix .. HI_HEX .. HEX2[(lo - b) / 256] .. HEX2[b] .. HEX2[c] .. HEX2[d]
end

-- Whether the instant `a` (as the mode sees it) is past u64::MAX, and `a` capped there: the
-- saturating adds of the core's TAT arithmetic.
local function over_at(a)
  if not RELATIVE then return over_u64(a) end
  if not LIMB[a] then
    if a < 0 or ROOMY then return false end
  end
  return over_u64(add(now_abs(), a))
end

local function clamp_at(a)
  if not over_at(a) then return a end
  if RELATIVE then return sub(U64MAX, now_abs()) end
  return U64MAX
end

-- The window of the call's time for window length `w`: its index floor(NOW_ABS / w) and
-- NOW_ABS mod w (ns into it). One limb division per window length while the time stays
-- in the same window, or moves on by less than 2^52 ns: the function library (FCALL)
-- keeps, per length, the last window and its start (32-bit halves) between calls. The
-- memo holds at most 64 lengths; it is a pure cache, so replicas and the EVAL fallback
-- (which starts empty each call) compute the same.
local WINDOWS, WINDOW_COUNT = {}, 0

-- window_of's first case, for the hot paths to paste (inlined as window_memo: no call):
-- `cur, into` of the length `window` from the memo if the call's time is still in its
-- window, else from window_of.
--[=[@define window_memo
local cur, into
local memo = WINDOWS[window]
if memo then
  local d = NOW_H - memo[2]
  if d >= 0 and d < HI_SPAN then
    d = d * TWO32 + (NOW_L - memo[3])
    if d >= 0 and d < window then cur, into = memo[1], d end
  end
end
if cur == nil then cur, into = window_of(window) end
--]=]

local function window_of(w)
  local c = WINDOWS[w] -- (never a limb array's)
  if c then
    local dh = NOW_H - c[2]
    if dh >= 0 and dh < HI_SPAN then
      local d = dh * TWO32 + (NOW_L - c[3])
      if d >= 0 then
        if d < w then return c[1], d end
        local k, e = divmod(d, w)
        if not LIMB[k] then
          -- move the memo k windows on: its start by d - e (< 2^53)
          local step = d - e
          local sh = floor(step / TWO32)
          local lo = c[3] + (step - sh * TWO32)
          local hi = c[2] + sh
          if lo >= TWO32 then lo = lo - TWO32; hi = hi + 1 end
          c[1], c[2], c[3] = add(c[1], k), hi, lo
          return c[1], e
        end
      end
    end
  end
  local index, into = divmod(now_abs(), w)
  if not LIMB[w] then
    -- the window's start, NOW_ABS - into (into < w < 2^53), as halves
    local ih = floor(into / TWO32)
    local lo = NOW_L - (into - ih * TWO32)
    local hi = NOW_H - ih
    if lo < 0 then lo = lo + TWO32; hi = hi - 1 end
    if c then
      c[1], c[2], c[3] = index, hi, lo
    else
      if WINDOW_COUNT >= 64 then WINDOWS, WINDOW_COUNT = {}, 0 end
      WINDOWS[w] = { index, hi, lo }
      WINDOW_COUNT = WINDOW_COUNT + 1
    end
  end
  return index, into
end

-- A whole number of milliseconds as the decimal string a command's argument is: a Lua
-- number handed to redis.call is printed by Redis with %.17g (a snprintf, ~2 500
-- instructions), where a string goes as it is. TTLs repeat from key to key, so the library
-- keeps the strings of the last ones (at most 1024, a pure cache).
local MS_STR, MS_COUNT = {}, 0

local function ms_arg(ms)
  local s = MS_STR[ms]
  if s then return s end
  s = format('%.0f', ms)
  if MS_COUNT >= 1024 then MS_STR, MS_COUNT = {}, 0 end
  MS_STR[ms] = s
  MS_COUNT = MS_COUNT + 1
  return s
end

-- Milliseconds of TTL for a state that is fresh again after `reset` ns: rounded up, plus
-- margins for Redis' millisecond expiry clock, plus the configured slack (a string: see
-- ms_arg).
local function ttl_ms(reset, slack)
  if LIMB[reset] then reset = L_tonum(reset) end
  return ms_arg(floor(reset / 1000000) + 3 + slack)
end

-- A decision as the core's Decision, as five values (no table): allowed (1 or 0),
-- remaining, reset_after, retry_after, delay. An algorithm's decide returns its next state
-- and span, then these (`return next, span, allow(...)`), then `true`: the four values may
-- be limb arrays (an algorithm's number path returns numbers only, and no sixth value).
local function allow(remaining, reset, delay)
  return 1, remaining, reset, ZERO, delay or ZERO, true
end

local function deny(remaining, reset, retry)
  -- Decision::deny: a deny always says to wait at least 1 ns
  if is_zero(retry) then retry = ONE end
  return 0, remaining, reset, retry, ZERO, true
end

-- The reply's wait field of a decision: its delay (>= 0) on an admit, minus its retry_after
-- (<= -1: a deny waits at least 1 ns) on a deny (the other is 0 there: see allow and
-- deny); an integer reply for a number (below 2^53, so Redis' conversion of a Lua number
-- to an integer reply is exact), 16 hex digits for limbs, after '-' on a deny.
local function wait_field(ok, c, e)
  if ok == 1 then
    if LIMB[e] then return tohex(e) end
    return e
  end
  if LIMB[c] then return '-' .. tohex(c) end
  return -c
end

-- A decision's three reply fields, for the hot paths to paste (inlined as
-- decision_fields: no call): `a`, `b`, `c` become remaining, reset_after (each a number,
-- or 16 hex digits for limbs) and the wait (see wait_field), from a decide's `ok, a, b, c,
-- e` and `limbs` (true where a value may be limbs: see allow; nil on the number path,
-- where a deny's wait is minus its retry and an admission's its delay).
--[=[@define decision_fields
if limbs then
  c = wait_field(ok, c, e)
  if LIMB[a] then a = tohex(a) end
  if LIMB[b] then b = tohex(b) end
elseif ok == 1 then
  c = e
else
  c = -c
end
--]=]

-- Writes a decision as tier `i`'s three reply fields (after the flag): see
-- decision_fields.
local function put_decision(reply, i, ok, a, b, c, e)
  local limbs = true
  --@inline decision_fields
  local base = 3 * i - 1
  reply[base], reply[base + 1], reply[base + 2] = a, b, c
end

-- Reads 16-hex-digit fields packed in one string value (nil or missing: all zero).
local function fields(raw, n)
  local t = {}
  for i = 1, n do
    if raw then t[i] = hex(strsub(raw, 16 * i - 15, 16 * i)) else t[i] = ZERO end
  end
  return t
end

-- The core's tat::give_back (GCRA / token bucket / leaky bucket refund): cost*T off the
-- state, never below `floor` (nor below a state already at or before it).
local function tat_give_back(state, floor_at, cost_t)
  if cmp(state, floor_at) <= 0 then return state end
  return max(sat_sub(state, cost_t), floor_at)
end

-- The core's tat::charge: max(state, now) + cost*T, saturating; unchanged for cost 0.
local function tat_charge(state, now, cost_t, cost)
  if cost == 0 then return state end
  return clamp_at(add(max(state, now), cost_t))
end

-- A sorted-set log as the view sliding_window_log.lua reads: `n` permits at ranks
-- `base .. base + n - 1`. A view is a table of its data and shared functions, called as
-- methods (`view:stamp_at(rank)`), so making one defines no function.
local function zset_member(view, rank)
  return redis.call('ZRANGE', view.key, view.base + rank, view.base + rank)[1]
end

local function zset_stamp_at(view, rank)
  return hex(strsub(zset_member(view, rank), 1, 16))
end

local function zset_next_seq(view)
  if view.n == 0 then return ZERO end
  return add(hex(strsub(zset_member(view, view.n - 1), 17, 32)), ONE)
end

local function zset_view(key, n, base)
  return { n = n, key = key, base = base, stamp_at = zset_stamp_at, next_seq = zset_next_seq }
end

-- Appends `count` permits stamped `stamp` to the log at `key`, numbered from `seq`, in
-- chunks (keeping unpack() far below Lua's C stack limit).
local function zset_append(key, stamp, count, seq)
  local s = tohex(stamp)
  local left = count
  while left > 0 do
    local chunk = math.min(left, 256)
    local args = {}
    for i = 1, chunk do
      args[2 * i - 1] = 0
      args[2 * i] = s .. tohex(seq)
      seq = add(seq, ONE)
    end
    redis.call('ZADD', key, unpack(args))
    left = left - chunk
  end
end

local ALGOS = {}
