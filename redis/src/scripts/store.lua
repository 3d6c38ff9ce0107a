-- tollgate policy store runner (RedisStore): one operation on every tier of a plan, in one
-- round trip. States are *tagged*: each carries the shape it was written under, so a
-- state written under other parameters or another algorithm (a reload, a rolling deploy
-- where two rule versions touch one key) is converted on read by the mirror of the core's
-- PackedAlgorithm::rescale (and the used / with_used pair across the log), never an error.
--
-- Tags (the parameters a conversion needs, 16-hex each):
--   't' T        GCRA / token bucket / leaky bucket: a time running T ns ahead per permit
--   'f' W L      fixed window            state value: tag .. hex(index) .. hex(count)
--   'c' W L      sliding window counter  state value: tag .. hex(index) .. hex(prev) .. hex(curr)
--   'l' W L      sliding window log      a sorted set: the permits (score 0, see
--                                        sliding_window_log.lua) and the tag as one
--                                        member of score 1, which ranks after them all
-- A GCRA state value is tag .. hex(TAT); a leaky bucket's tag .. hex(F); either followed by
-- 'h' when the key was given headroom (see write_word).
--
-- ARGV: the *mode*, the operation ('c' check, 'p' peek, 'q' peek of a request denied
-- elsewhere: admitting tiers report their state at cost 0, 'r' refund, 'g' charge, 'x'
-- reset: every key deleted), the
-- TTL slack in ms (decimal), a space and the *deadline*, the last ms of the server's Unix
-- time (decimal) at which the call may still change anything (its client gives up after
-- it), as in 'c0 1764547200250'; then the *plan*, the tiers' specs separated by ';', each
-- space-separated words: the algorithm name, the tag, cmax (the most a state counts, where
-- a charge or a conversion saturates: a window's full packed count, a log's ceiling
-- L + 4096) and the algorithm's arguments, each number as the
-- prelude's arg() reads it; then the client's time (16 hex digits), absent to use the
-- server's TIME. KEYS: one per tier, in the plan's order.
--
-- Modes, plans and specs are parsed once: the function library keeps the parsed parameters
-- of the last ones it met (at most 256 modes, 256 plans and 256 specs, keyed by their
-- strings; a pure cache, so replicas and the EVAL fallback, which starts empty each call,
-- compute the same). The deadline rides in the mode so that it costs no argument of its
-- own and no conversion per call: the store rounds it down to a step of a twentieth of its
-- timeout (a power of two ms), so calls sent within one step (by every client whose
-- estimate of the server's clock agrees) share one mode string, parsed once.
-- Reply: the all-admitted flag, then for a check or peek per tier: remaining, reset_after
-- and the wait: the delay (>= 0) if admitted, minus the retry_after (<= -1) if denied (each
-- an integer of magnitude below 2^53, or 16 hex digits, after '-' on a deny); to a refund
-- or charge: { 1 }. A call whose deadline has passed, whatever its operation, reads and
-- writes nothing and replies the error 'TGEXPIRED <server µs> <deadline µs>'.
--
-- Everything but `main` is defined once: when the library loads (FUNCTION LOAD), or per
-- call only on the EVAL fallback. `main` sets the call's KEYS, ARGV, now and slack, which
-- the helpers read as upvalues.
-- (one scope: only main, the entry point, is seen outside this file)
local main
do
local KEYS, ARGV, now, slack
-- redis.call and redis.pcall, bound by main with the prelude's globals (see bind): an
-- upvalue read instead of a global's and a field's
local RCALL, RPCALL

-- The call's tiers, by index: T_P is the call's parsed plan (its specs, see `plan`; read
-- only), the others scratch arrays every call overwrites from 1 to #KEYS before reading
-- (no table per tier per call): the stored state as read (`old`, see load), the fields of
-- a state under the tier's own tag, the state the tier decides on, and a check's outcome
-- (next state, span, allowed).
local T_P, T_OLD, T_ST, T_STATE, T_NEXT, T_SPAN, T_OK = {}, {}, {}, {}, {}, {}, {}
-- and whether a GCRA / leaky bucket state under the tier's own tag was read with its 'h'
-- (see write_word)
local T_ROOMY = {}
-- and per tier a table for the next state an algorithm's number path fills (see decide's
-- `out`), made once
local T_OUT = {}

-- Instants in a state: a GCRA / leaky bucket state is one (read with inst, written with
-- inst_hex: relative to now in relative mode); window states hold indices and counts.

local TAG_LEN = { t = 17, f = 33, c = 33, l = 33 }
-- 2^51: headroom quanta, and the spans measured against them, stay below it
local HALF = 2251799813685248
local FIELDS = { t = 1, f = 2, c = 3 }

local function parse_tag(tag)
  local kind = strsub(tag, 1, 1)
  local len = TAG_LEN[kind]
  if len == nil or #tag < len then return nil end
  local p2 = nil
  if len == 33 then p2 = hex(strsub(tag, 18, 33)) end
  return kind, hex(strsub(tag, 2, 17)), p2, len
end

-- f(...) with 6 limbs (144 bits) instead of NL: the u128 products of conversions.
local function wide(f, a, b, c, d, e)
  local saved = NL
  NL = 6
  local r = f(a, b, c, d, e)
  NL = saved
  return r
end

-- The stored state of tier i's key (`raw`: its GET's reply, if the caller read it already;
-- never for a log): nil if absent; the tier's spec itself (whose kind and
-- tag are the state's) for a word state under the tier's own tag (the common case), its
-- fields then in T_ST[i]; otherwise { kind, p1, p2, tag, st (fields) or view (a log), zset
-- (the key is a sorted set) }. A value this runner did not write reads as kind nil (fresh,
-- replaced by the next write).
local function load_log(key, n)
  -- a sorted set of n members: a log if its top member is our tag
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] == '1' then
    local kind, p1, p2 = parse_tag(top[1])
    if kind == 'l' then
      return { kind = 'l', p1 = p1, p2 = p2, tag = top[1], view = zset_view(key, n - 1, 0), zset = true }
    end
  end
  return { zset = true }
end

-- The fields of the window state values (under their own tag) load read last, by value
-- (at most 1024, numbers only, a pure cache): a window's index is the same in every key and
-- its counts small and repeating, so whole values repeat from key to key, and a value met
-- before needs no parsing. Each entry: { field 1, 2, 3 (as read: the third only for a
-- sliding window counter), tag }.
local RAWV, RAWV_COUNT = {}, 0

local function load(i, p, raw)
  local key = KEYS[i]
  if raw == nil then
    if p.kind == 'l' then
      local n = redis.pcall('ZCARD', key)
      if type(n) == 'number' then
        if n == 0 then return nil end
        return load_log(key, n)
      end
    end
    raw = redis.pcall('GET', key)
  end
  if raw == false then return nil end
  -- (an error reply is a table, of length 0)
  local len = p.len
  local n = #raw
  local roomy = false
  if p.kind ~= 't' then
    -- a window state's value read before, under this tag (see RAWV)
    local c = RAWV[raw]
    if c and c[4] == p.tag then
      local st = T_ST[i]
      if st == nil then
        st = { 0, 0, 0 }
        T_ST[i] = st
      end
      st[1], st[2], st[3] = c[1], c[2], c[3]
      return p
    end
  elseif n == p.vlen + 1 then
    -- a GCRA / leaky bucket value with its 'h' (see write_word)
    roomy = strsub(raw, n) == 'h'
    if roomy then n = n - 1 end
  end
  if n == p.vlen and find(raw, p.tag, 1, true) == 1 then
    -- the tier's own tag (the common case) needs no parsing: convert keeps such a state
    local st = T_ST[i]
    if st == nil then
      st = { 0, 0, 0 }
      T_ST[i] = st
    end
    if p.kind == 't' then
      st[1] = inst(raw, len + 1)
      T_ROOMY[i] = roomy
    else
      -- hex_at, through the cache of field values (see HEXV)
      local h = strsub(raw, len + 1, len + 16)
      st[1] = HEXV[h] or hex_field(h)
      h = strsub(raw, len + 17, len + 32)
      st[2] = HEXV[h] or hex_field(h)
      if p.kind == 'c' then
        h = strsub(raw, len + 33, len + 48)
        st[3] = HEXV[h] or hex_field(h)
      end
      if not LIMB[st[1]] and not LIMB[st[2]] and not LIMB[st[3]] then
        if RAWV_COUNT >= 1024 then RAWV, RAWV_COUNT = {}, 0 end
        RAWV[raw] = { st[1], st[2], st[3], p.tag }
        RAWV_COUNT = RAWV_COUNT + 1
      end
    end
    return p
  end
  if type(raw) ~= 'string' then
    -- not a string: a sorted set (a log), or a script error for a value of another type
    return load_log(key, redis.call('ZCARD', key))
  end
  local kind, p1, p2
  kind, p1, p2, len = parse_tag(raw)
  local nf = kind and FIELDS[kind]
  if nf == nil then return {} end
  if #raw ~= len + 16 * nf and (kind ~= 't' or #raw ~= len + 17 or strsub(raw, -1) ~= 'h') then
    -- (a GCRA / leaky bucket value may end in 'h': see write_word)
    return {}
  end
  -- constructors size each table once (filling one slot at a time grows it step by step)
  local st
  if kind == 't' then
    st = { inst(raw, len + 1) }
  elseif nf == 2 then
    st = { hex_at(raw, len + 1), hex_at(raw, len + 17) }
  else
    st = { hex_at(raw, len + 1), hex_at(raw, len + 17), hex_at(raw, len + 33) }
  end
  return { kind = kind, p1 = p1, p2 = p2, tag = strsub(raw, 1, len), st = st }
end

-- A log of `count` permits stamped `stamp`, not yet in Redis.
local function virtual_stamp_at(view) return view.stamp end
local function virtual_next_seq(view) return view.n end

local function virtual_log(stamp, count)
  return {
    n = count, virtual = true, stamp = stamp,
    stamp_at = virtual_stamp_at, next_seq = virtual_next_seq,
  }
end

-- Fresh states. No algorithm writes to a state it is given, so these are shared.
local FRESH_T_REL, FRESH_T_ABS = { -EXACT }, { 0 }
local FRESH_F, FRESH_C = { ZERO, ZERO }, { ZERO, ZERO, ZERO }

local function fresh(kind)
  if kind == 'l' then return virtual_log(ZERO, 0) end
  if kind == 't' then
    -- { EPOCH }
    if RELATIVE then return FRESH_T_REL end
    return FRESH_T_ABS
  end
  if kind == 'f' then return FRESH_F end
  return FRESH_C
end

-- Permits used at `now` under the state's own shape: the core's Algorithm::used
-- (tat::used, FixedWindow::used, SlidingWindowCounter::used, SlidingWindowLog::used).
local function used_of(old)
  local kind, st = old.kind, old.st
  if kind == 't' then
    if cmp(st[1], now) <= 0 then return ZERO end
    local q, r = divmod(sub(st[1], now), old.p1)
    if is_zero(r) then return q end
    return add(q, ONE)
  elseif kind == 'f' then
    local _, count = ALGOS.fixed.current(st, old.p1)
    return count
  elseif kind == 'c' then
    local _, prev, curr, elapsed = ALGOS.swc.roll(st, old.p1)
    local q, r = divmod(mul(prev, sub(old.p1, elapsed)), old.p1)
    if not is_zero(r) then q = add(q, ONE) end
    return add(curr, q)
  end
  -- over the newest ceiling of the log's own limit, beyond the limit too
  local log = ALGOS.log
  return small((log.count(old.view, old.p1, log.ceiling(tonum(old.p2)), now)))
end

-- The state with `used` permits counted at `now` under (kind, p1, p2), `cmax` the most it
-- counts (a window's full packed count, a log's ceiling): the core's Algorithm::with_used
-- / SlidingWindowLog::with_used, not capped at the limit.
local function with_used(kind, p1, p2, cmax, used)
  if kind == 'l' then return virtual_log(now, tonum(min(used, cmax))) end
  if is_zero(used) then return fresh(kind) end
  if kind == 't' then return { clamp_at(add(now, clamp_u64(mul(used, p1)))) } end
  if kind == 'f' then return { (window_of(p1)), min(used, cmax) } end
  return { (window_of(p1)), ZERO, min(used, cmax) }
end

-- `old` moved to (kind, p1, p2) at `now` (`cmax` as with_used's), in 6 limbs:
-- PackedAlgorithm::rescale's table, SlidingWindowLog::rescale_from, and the used /
-- with_used pair for the pairs they do not cover (as the in-process store does).
local function rescaled(old, kind, p1, p2, cmax)
  if old.kind == 'l' and kind == 'l' then
    -- SlidingWindowLog::rescale_from: the permits the old log still counts (its `used`
    -- ones: in its window among its newest ceiling), as they are
    local view = old.view
    local log = ALGOS.log
    local _, first = log.count(view, old.p1, log.ceiling(tonum(old.p2)), now)
    if first == 0 then return view end
    return zset_view(view.key, view.n - first, view.base + first)
  end
  if old.kind == 't' and kind == 't' then
    -- tat::rescale: the debt (state - now)·to/from, rounded up, not capped
    local s = old.st[1]
    if cmp(s, now) <= 0 then return { s } end
    local q, r = divmod(mul(sub(s, now), p1), old.p1)
    if not is_zero(r) then q = add(q, ONE) end
    return { clamp_at(add(now, clamp_u64(q))) }
  end
  if (old.kind == 'f' or old.kind == 'c') and kind == old.kind and cmp(old.p1, p1) == 0 then
    -- FixedWindow::rescale_from / SlidingWindowCounter::rescale_from, same window (so the
    -- same layout): the state as it is, every count whole
    return old.st
  end
  return with_used(kind, p1, p2, cmax, used_of(old))
end

-- Tier i's state from `old` (see load): as it is under the tier's own tag, fresh if absent
-- or foreign, else rescaled.
local function convert(i, old)
  local p = T_P[i]
  if old == p then return T_ST[i] end
  local kind = p.kind
  if old == nil or old.kind == nil then return fresh(kind) end
  if old.tag == p.tag then
    if kind == 'l' then return old.view end
    return old.st
  end
  return wide(rescaled, old, kind, p.p1, p.p2, p.cmax)
end

-- Writes tier i's word state under its tag, expiring when the state is fresh again
-- (`span` from now, if the caller knows it).
--
-- A window state is fresh again at an instant that depends on the state alone: a fixed
-- window's at the end of its window, a sliding window counter's at the end of its window's
-- successor if curr > 0, else of its window if prev > 0, else at once. So when the key
-- holds a state under the tier's own tag (written here, with its expiry) that is fresh
-- again at the same instant as the one written, the key keeps its expiry, and as its value
-- is the one load read, only the fields after the unchanged window index are overwritten
-- (SETRANGE: a third of a SET with PX, which also sets the expiry and has it propagated as
-- PXAT). That expiry was computed the same way from that same instant (a millisecond apart
-- at most, by rounding, within the margins ttl_ms adds).
--
-- A GCRA / leaky bucket state is fresh again at an instant R = now + span, which each
-- check that admits moves on (never back). A key whose R is well ahead (span at least H/2,
-- H the tier's `head`: see parse_spec) is given *headroom*: time is cut into quanta of H
-- ns (from instant 0, as window_of cuts windows), the key's TTL runs to the end of R's
-- quantum (plus the margins), so it outlives the instant its state is fresh again by less
-- than H (and the margins), and its value ends in 'h'. A check that finds such a value
-- under the tier's own tag (its state S, whose quantum's end the key's expiry covers: every
-- write of a value with 'h' keeps that so, R >= S) and whose R lies in S's quantum only
-- overwrites the state (SETRANGE: the key keeps its expiry and its 'h'). Otherwise the key
-- is SET: with headroom if the span is H/2 or more, else with the TTL of the state itself
-- (a key far below its limit then disappears soon, and reads as absent, the cheapest
-- read). Decisions do not change: the state written is the same, and only the key's
-- expiry differs. (Earlier versions of this script read a value with 'h' as a foreign
-- one, i.e. no state.)
local function write_word(i, st, span)
  local p = T_P[i]
  local kind = p.kind
  local value
  if kind == 't' then
    local check = span ~= nil
    if span == nil then
      local _, _, _, _, reset = p.decide(st, p, now, true)
      span = reset
    end
    local q = p.head
    local roomy = check and T_OLD[i] == p and T_ROOMY[i]
    if q and not LIMB[span] and span < HALF and (roomy or span >= p.half) then
      -- R's quantum, as the number of quanta from now's (into + span < 2^52: ndiv's domain)
      local _, into = window_of(q)
      local k = ndiv(into + span, q)
      if roomy then
        -- the state read, ns from now (in absolute mode, where now may be limbs, only
        -- numbers are compared: a pure shortcut); R is in its quantum if that is not
        -- before R's (R >= S)
        local so = T_ST[i][1]
        if not RELATIVE then
          if LIMB[so] or LIMB[now] then so = -EXACT else so = so - now end
        end
        if not LIMB[so] and into + so >= k * q then
          redis.call('SETRANGE', KEYS[i], p.off1, inst_hex('', st[1]))
          return
        end
      end
      if span >= p.half then
        -- headroom: the TTL to the end of R's quantum
        local ms = ((k + 1) * q - into) / 1000000
        ms = ms - ms % 1 + 3 + slack
        redis.call('SET', KEYS[i], inst_hex(p.tag, st[1]) .. 'h', 'PX', MS_STR[ms] or ms_arg(ms))
        return
      end
    end
    value = inst_hex(p.tag, st[1])
  else
    -- tohex, its cache looked up first
    local index, b = st[1], st[2]
    local hb = HEXN[b] or tohex(b)
    if T_OLD[i] == p then
      local old = T_ST[i]
      if old[1] == index then
        if kind == 'f' then
          redis.call('SETRANGE', KEYS[i], p.off2, hb)
          return
        end
        local c = st[3]
        if (old[3] == 0) == (c == 0) and (old[2] == 0) == (b == 0) then
          local hc = HEXN[c] or tohex(c)
          if old[2] == b then
            redis.call('SETRANGE', KEYS[i], p.off3, hc)
          else
            redis.call('SETRANGE', KEYS[i], p.off2, hb .. hc)
          end
          return
        end
      end
    end
    value = p.tag .. (HEXN[index] or tohex(index)) .. hb
    if kind == 'c' then
      local c = st[3]
      value = value .. (HEXN[c] or tohex(c))
    end
  end
  if span == nil then
    local _, _, _, _, reset = p.decide(st, p, now, true)
    span = reset
  end
  -- ttl_ms(span, slack), inlined (span >= 0: see ndiv for the floor)
  if LIMB[span] then span = L_tonum(span) end
  local ms = span / 1000000
  ms = ms - ms % 1 + 3 + slack
  redis.call('SET', KEYS[i], value, 'PX', MS_STR[ms] or ms_arg(ms))
end

-- Writes tier i's log: the oldest `keep` permits of its current view, then `record`
-- ({ stamp, count }) appended, then (as every executor ends a write into a log) its
-- droppable oldest permits removed (SlidingWindowLog::droppable: beyond the newest p.cmax,
-- the log's ceiling, or out of the window and older than the newest L), the tag member
-- refreshed.
local function write_log(i, keep, record, span)
  local p, view, key, old = T_P[i], T_STATE[i], KEYS[i], T_OLD[i]
  local ceiling = p.cmax
  local n = keep
  local real = not view.virtual and old and old.zset and old.kind == 'l'
  local seq = view:next_seq()
  -- the rank from which the permits kept are in the window, when known without a search
  -- (see log.decide: a check that read every entry, then kept them all)
  local first = nil
  if real then
    -- a log converted from other parameters starts at `base` (see rescaled)
    if view.base > 0 then redis.call('ZREMRANGEBYRANK', key, 0, view.base - 1) end
    if keep < view.n then redis.call('ZREMRANGEBYRANK', key, keep, view.n - 1) end
    if old.tag ~= p.tag then
      redis.call('ZREM', key, old.tag)
      redis.call('ZADD', key, 1, p.tag)
    end
    if keep == view.n then first = view.first end
  else
    redis.call('DEL', key)
    zset_append(key, view.stamp, keep, ZERO)
    redis.call('ZADD', key, 1, p.tag)
    -- all stamped at the instant of the conversion, in the window
    first = 0
  end
  if record then
    zset_append(key, record[1], record[2], seq)
    n = n + record[2]
  end
  -- SlidingWindowLog::droppable of the log as written: the rank of its oldest permit in
  -- the window among the newest ceiling (the new record is in the window), at most n - L
  if first == nil then
    local _
    _, first = ALGOS.log.count(zset_view(key, n, 0), p[1], ceiling, now)
  elseif n - first > ceiling then
    first = n - ceiling
  end
  local drop = math.min(first, math.max(n - p[2], 0))
  if drop > 0 then
    redis.call('ZREMRANGEBYRANK', key, 0, drop - 1)
    n = n - drop
  end
  if span == nil then
    local _, _, _, _, reset = p.algo.decide(zset_view(key, n, 0), p, now, true)
    span = reset
  end
  redis.call('PEXPIRE', key, ttl_ms(span, slack))
end

-- Reads every tier's state (mode and `now` as set_now sets them) and converts it (T_STATE).
-- Returns whether absolute mode is needed: a log state (then not converted), or an instant
-- too far in the past for relative mode (converted, but to be read again).
local function load_all(tiers, hi, lo, relative)
  set_now(hi, lo, relative)
  if relative then now = 0 else now = NOW_ABS end
  local absolute = false
  for i = 1, tiers do
    local p = T_P[i]
    local old = load(i, p)
    T_OLD[i] = old
    -- convert's common cases inlined: a state under the tier's own tag as it is, an absent
    -- GCRA / leaky bucket state fresh
    if old == p then
      T_STATE[i] = T_ST[i]
    elseif old == nil and p.kind == 't' then
      if RELATIVE then T_STATE[i] = FRESH_T_REL else T_STATE[i] = FRESH_T_ABS end
    elseif old and old.kind == 'l' and relative then
      absolute = true
    else
      T_STATE[i] = convert(i, old)
    end
  end
  return absolute or FAR
end

-- write_word of a fresh GCRA state's next one, for the hot paths to paste (inlined as
-- fresh_set): tier `i`'s key SET to inst_hex of now + cost*T (`lo`, `hi`: its 32-bit
-- halves before the carry) with the state's TTL, what parse_spec precomputed for the
-- spec `p`.
--[=[@define fresh_set
if lo >= TWO32 then lo = lo - TWO32; hi = hi + 1 end
if hi ~= HI_NUM then HI_NUM, HI_HEX = hi, format('%08x', hi) end
local d = lo % 256
lo = (lo - d) / 256
local c = lo % 256
lo = (lo - c) / 256
local b = lo % 256
local ms = p.fresh_ms + slack
RCALL('SET', KEYS[i], p.tag .. HI_HEX .. HEX2[(lo - b) / 256] .. HEX2[b] .. HEX2[c] .. HEX2[d],
  'PX', MS_STR[ms] or ms_arg(ms))
--]=]

-- The replies check_words returns, one per tier count up to 3, reused from call to call
-- (Redis only reads a returned table, and check_words sets every field).
local REPLY_N = { { 1, 0, 0, 0 }, { 1, 0, 0, 0, 0, 0, 0 }, { 1, 0, 0, 0, 0, 0, 0, 0, 0, 0 } }

-- A check (op 'c') of up to 3 word tiers (no log tier) in relative mode on the number path
-- (ROOMY: see set_now; HEX2 built): main's general steps (load_all, each tier's decide,
-- the reply, the writes) fused into one pass over the tiers, keeping each tier's
-- outcome in locals instead of T_STATE, T_NEXT, T_SPAN and T_OK. A GCRA tier whose key is
-- absent takes the outcome parse_spec precomputed (fresh_*: gcra.decide of the fresh
-- state, and write_word's SET, as in main's one-tier fast path). Returns nil and true,
-- having written nothing, where absolute mode is needed (as load_all's return): a key
-- holding a log, or an instant too far in the past for relative mode. Decisions are pure (the caches they
-- touch are), so deciding a tier before the next one is read changes nothing.
local function check_words(tiers, hi, lo)
  -- set_now(hi, lo, true), inlined (ROOMY and FAST: see the caller)
  NOW_H, NOW_L, NOW_ABS = hi, lo, nil
  RELATIVE, ROOMY, EPOCH, FAR, FAST = true, true, -EXACT, false, true
  now = 0
  local reply = REPLY_N[tiers]
  local all = 1
  -- per tier: the next state, its span, the verdict, the state decided on, and whether that
  -- is a window state read under the tier's own tag (then written here: see below)
  local n1, n2, n3, s1, s2, s3, k1, k2, k3, t1, t2, t3, w1, w2, w3
  for i = 1, tiers do
    local p = T_P[i]
    local raw = RPCALL('GET', KEYS[i])
    local next, span, ok, a, b, c, st
    local own = false
    local v = RAWV[raw]
    if raw == false and p.fresh_rem then
      -- gcra.decide of the fresh state (see parse_spec): admitted, the spec as the next
      -- state's mark
      st, next, span, ok, a, b, c = FRESH_T_REL, p, p[3], 1, p.fresh_rem, p[3], 0
    else
      if v and v[4] == p.tag and p.kind ~= 't' then
        -- load's first case (a window state's value read before, under this tag: see
        -- RAWV), its fields read where they are cached (never written to)
        st, own = v, true
      else
        -- load_all's steps for the tier
        local old = load(i, p, raw)
        T_OLD[i] = old
        if old == p then
          st = T_ST[i]
          own = p.kind ~= 't'
        elseif old == nil and p.kind == 't' then
          st = FRESH_T_REL
        elseif old and old.kind == 'l' then
          return nil, true
        else
          st = convert(i, old)
        end
        if FAR then return nil, true end
      end
      local out = T_OUT[i]
      if out == nil then
        out = { 0, 0, 0 }
        T_OUT[i] = out
      end
      local e, limbs
      if p.kind == 'f' and p.num then
        -- fixed.decide's number path, pasted (FAST is set)
        local window, limit, cost = p[1], p[2], p[3]
        --@inline fixed_number
      elseif p.kind == 'c' and p.num then
        -- swc.decide's number path to an admission with prev <= L, pasted (FAST is set)
        local window, limit, cost = p[1], p[2], p[3]
        --@inline swc_number
      end
      if ok == nil then
        next, span, ok, a, b, c, e, limbs = p.decide(st, p, now, false, out)
      end
      --@inline decision_fields
    end
    local base = 3 * i - 1
    reply[base], reply[base + 1], reply[base + 2] = a, b, c
    if ok == 0 then all = 0 end
    if i == 1 then
      n1, s1, k1, t1, w1 = next, span, ok, st, own
    elseif i == 2 then
      n2, s2, k2, t2, w2 = next, span, ok, st, own
    else
      n3, s3, k3, t3, w3 = next, span, ok, st, own
    end
  end
  reply[1] = all
  if all == 1 then
    for i = 1, tiers do
      local next, span, old, own
      if i == 1 then
        next, span, old, own = n1, s1, t1, w1
      elseif i == 2 then
        next, span, old, own = n2, s2, t2, w2
      else
        next, span, old, own = n3, s3, t3, w3
      end
      local p = T_P[i]
      if own and next then
        -- write_word of a window state read under the tier's own tag (`old`): its SETRANGE
        -- cases inlined, else (T_OLD not set for it here) its SET
        local index, b = next[1], next[2]
        local kind = p.kind
        local done = false
        if old[1] == index then
          local hb = HEXN[b] or tohex(b)
          if kind == 'f' then
            RCALL('SETRANGE', KEYS[i], p.off2, hb)
            done = true
          else
            local c = next[3]
            if (old[3] == 0) == (c == 0) and (old[2] == 0) == (b == 0) then
              local hc = HEXN[c] or tohex(c)
              if old[2] == b then
                RCALL('SETRANGE', KEYS[i], p.off3, hc)
              else
                RCALL('SETRANGE', KEYS[i], p.off2, hb .. hc)
              end
              done = true
            end
          end
        end
        if not done then
          T_OLD[i] = nil
          write_word(i, next, span)
        end
      elseif next == p then
        -- write_word of the fresh state's next one (see main's one-tier fast path):
        -- inst_hex of now + cost*T, SET with the state's TTL
        local lo, hi = NOW_L + p.fresh_vl, NOW_H + p.fresh_vh
        --@inline fresh_set
      elseif next then
        write_word(i, next, span)
      end
    end
  else
    for i = 1, tiers do
      local ok, st
      if i == 1 then
        ok, st = k1, t1
      elseif i == 2 then
        ok, st = k2, t2
      else
        ok, st = k3, t3
      end
      if ok == 1 then
        -- the request did not count: an admitting tier reports its current state
        local p = T_P[i]
        local _, _, ok, a, b, c, e = p.algo.decide(st, p, now, true)
        put_decision(reply, i, ok, a, b, c, e)
      end
    end
  end
  return reply
end

-- A tier spec parsed: { algo, decide (algo.decide), kind, tag, p1, p2 (the tag's parameters), cmax, [1..args]
-- (the algorithm's parameters), num (all of them numbers below 2^52: see the prelude's
-- FAST), len (the tag's length), vlen (a word state's length under the tag, -1 for a log),
-- off2 and off3 (see write_word) }, or nil and an error message.
local SPECS, SPEC_COUNT = {}, 0

local function parse_spec(s)
  local w, n = {}, 0
  for word in gmatch(s, '[^ ]+') do
    n = n + 1
    w[n] = word
  end
  local algo = ALGOS[w[1]]
  if algo == nil then return nil, 'unknown algorithm ' .. tostring(w[1]) end
  local tag = w[2] or ''
  local kind = strsub(tag, 1, 1)
  if TAG_LEN[kind] ~= #tag or (kind == 'l') ~= (algo.fields == 0) then
    return nil, 'bad tag ' .. tag
  end
  if n ~= 3 + algo.args then return nil, 'bad tier ' .. s end
  local _, p1, p2 = parse_tag(tag)
  local p = {
    algo = algo, decide = algo.decide, kind = kind, tag = tag, p1 = p1, p2 = p2,
    cmax = arg(w[3]), num = true,
  }
  -- a word state's length under this tag (none for a log)
  p.len = #tag
  p.vlen = -1
  if FIELDS[kind] then p.vlen = #tag + 16 * FIELDS[kind] end
  -- the 0-based offsets of a state's first, second and third fields (SETRANGE's argument)
  p.off1, p.off2, p.off3 = format('%d', #tag), format('%d', #tag + 16), format('%d', #tag + 32)
  for j = 1, algo.args do
    local v = arg(w[3 + j])
    p[j] = v
    if LIMB[v] or v >= SMALL then p.num = false end
  end
  -- a GCRA / leaky bucket key's headroom H (see write_word): the second parameter, GCRA's
  -- tolerance tau or the leaky bucket's horizon, where it is a number from 2 to 2^51 - 1
  -- (else none: every TTL is the state's own); half: H/2 rounded up
  if kind == 't' and not LIMB[p[2]] and p[2] >= 2 and p[2] < HALF then
    p.head = p[2]
    p.half = p[2] - (p[2] - p[2] % 2) / 2
  end
  -- A GCRA check on an absent key (see main's fast path): gcra.decide (Gcra::decide) of the
  -- fresh state in relative mode on its number path (now = 0, the state before it: tat = 0,
  -- new_tat = ahead = cost*T) depends on the parameters alone, as does write_word's TTL of
  -- the state written when the key gets no headroom. Kept where the check admits and
  -- writes (cost > 0, cost*T <= tau) without headroom: the reply's remaining
  -- (tau - cost*T) / T and reset_after cost*T; write_word's TTL before the slack (ms);
  -- inst_hex's split of cost*T into 32-bit halves.
  if algo == ALGOS.gcra and p.num and p[4] > 0 and p[3] <= p[2]
    and not (p.head and p[3] >= p.half) then
    local ahead = p[3]
    p.fresh_rem = ndiv(p[2] - ahead, p[1])
    p.fresh_reply = { 1, p.fresh_rem, ahead, 0 }
    local ms = ahead / 1000000
    p.fresh_ms = ms - ms % 1 + 3
    local vh = ahead / TWO32
    vh = vh - vh % 1
    p.fresh_vh, p.fresh_vl = vh, ahead - vh * TWO32
  end
  return p
end

local function spec(s)
  local p = SPECS[s]
  if p then return p end
  local err
  p, err = parse_spec(s)
  if p == nil then return nil, err end
  if SPEC_COUNT >= 256 then SPECS, SPEC_COUNT = {}, 0 end
  SPECS[s] = p
  SPEC_COUNT = SPEC_COUNT + 1
  return p
end

-- A plan parsed: its specs in order, n (how many), relative (no log tier: see load_all).
-- Never written to once made (main reads the call's tiers from it as T_P).
local PLANS, PLAN_COUNT = {}, 0

local function plan(s)
  local t, n = { relative = true }, 0
  for part in gmatch(s, '[^;]+') do
    local p, err = spec(part)
    if p == nil then return nil, err end
    n = n + 1
    t[n] = p
    if p.kind == 'l' then t.relative = false end
  end
  t.n = n
  if PLAN_COUNT >= 256 then PLANS, PLAN_COUNT = {}, 0 end
  PLANS[s] = t
  PLAN_COUNT = PLAN_COUNT + 1
  return t
end

-- A mode parsed: { op, slack, deadline (in µs, a number: below 2^53 until the year 2255) }.
local MODES, MODE_COUNT = {}, 0

local function mode(s)
  local m = MODES[s]
  if m then return m end
  local space = find(s, ' ', 2, true)
  if space == nil then return nil end
  local ms = tonumber(strsub(s, space + 1), 10)
  m = { op = strsub(s, 1, 1), slack = tonumber(strsub(s, 2, space - 1), 10) }
  if m.slack == nil or ms == nil then return nil end
  m.deadline = ms * 1000
  if MODE_COUNT >= 256 then MODES, MODE_COUNT = {}, 0 end
  MODES[s] = m
  MODE_COUNT = MODE_COUNT + 1
  return m
end

-- One operation: the script's entry point (FCALL's function, or the EVAL body's return).
function main(keys, args)
  if floor == nil then
    bind()
    RCALL, RPCALL = redis.call, redis.pcall
  end
  KEYS, ARGV = keys, args
  NL = BASE_NL
  local m = MODES[ARGV[1]] or mode(ARGV[1] or '')
  if m == nil then return redis.error_reply('ERR tollgate: bad mode') end
  local op = m.op
  slack = m.slack
  local tiers = #KEYS
  local hi, lo
  local client = ARGV[3]
  -- The server's TIME: the deadline's clock (and the call's, without a client time).
  local t = RCALL('TIME')
  if t[1] ~= TIME_S then
    local s = tonumber(t[1], 10)
    local sl = s % 65536
    local x = (s - sl) / 65536 * 1000000000
    local xl = x % 65536
    TIME_S, TIME_HI, TIME_LO, TIME_US = t[1], (x - xl) / 65536, xl * 65536 + sl * 1000000000,
      s * 1000000
  end
  -- (the string coerced, as tonumber(t[2], 10) reads it, without the call)
  local us = t[2] + 0
  -- The deadline (see "Deadlines" on RedisStore): a call that runs later (the server was
  -- stalled or paused while it waited in its buffer) changes nothing: an error reply, with
  -- the server's time, which the store answers by its failure policy (if it still listens).
  if TIME_US + us > m.deadline then
    return redis.error_reply(format('TGEXPIRED %.0f %.0f', TIME_US + us, m.deadline))
  end
  if client == nil then
    -- the server's TIME in ns as its high and low 32 bits (see TIME_S in the prelude)
    lo = TIME_LO + us * 1000
    local c = lo / TWO32
    c = c - c % 1 -- floor (see ndiv)
    hi, lo = TIME_HI + c, lo - c * TWO32
  else
    hi, lo = halves(client)
  end

  -- The plan's tiers, their specs parsed (or remembered).
  local pl = PLANS[ARGV[2]]
  if pl == nil then
    local err
    pl, err = plan(ARGV[2] or '')
    if pl == nil then return redis.error_reply('ERR tollgate: ' .. err) end
  end
  if pl.n ~= tiers then return redis.error_reply('ERR tollgate: a key per tier') end
  if op == 'x' then
    -- A reset (Op::Reset): every tier's state deleted, a fresh key from now on.
    for i = 1, tiers do RCALL('DEL', KEYS[i]) end
    return { 1 }
  end
  T_P = pl
  local relative = pl.relative

  if tiers == 1 and op == 'c' and relative and pl[1].kind == 't' then
    -- The commonest call, a check of one GCRA / leaky bucket tier: the steps below for
    -- one tier (load_all, decide, the reply, the write), without the per-tier arrays. A
    -- log's state or an instant too far for relative mode takes the general steps.
    local p = pl[1]
    local raw = RPCALL('GET', KEYS[1])
    if raw == false and p.fresh_rem and HEX2 and hi < ROOMY_HI then
      -- An absent key under a GCRA tier that admits a fresh state (see parse_spec): the
      -- steps below for it (set_now in relative mode, ROOMY: the number path; load: nil;
      -- gcra.decide: admitted; write_word: inst_hex of now + cost*T, SET with the state's
      -- TTL), with what the spec fixes precomputed.
      local i, lo, hi = 1, lo + p.fresh_vl, hi + p.fresh_vh
      --@inline fresh_set
      return p.fresh_reply
    end
    set_now(hi, lo, true)
    now = 0
    local old = load(1, p, raw)
    T_OLD[1] = old
    local st
    if old == p then
      st = T_ST[1]
    elseif old == nil then
      st = FRESH_T_REL
    elseif old.kind ~= 'l' then
      st = convert(1, old)
    end
    if st and not FAR then
      local out = T_OUT[1]
      if out == nil then
        out = { 0, 0, 0 }
        T_OUT[1] = out
      end
      local next, span, ok, a, b, c, e, limbs = p.decide(st, p, now, false, out)
      --@inline decision_fields
      if ok == 1 and next then write_word(1, next, span) end
      return { ok, a, b, c }
    end
  end

  -- check_words (a one-tier GCRA / leaky bucket check comes here from the steps above only
  -- where they need absolute mode)
  local absolute = false
  if op == 'c' and relative and tiers <= 3 and (tiers > 1 or pl[1].kind ~= 't')
    and HEX2 and hi < ROOMY_HI then
    local reply
    reply, absolute = check_words(tiers, hi, lo)
    if reply then return reply end
  end

  -- Their states, read and converted: relative to now (see the prelude) unless a log takes
  -- part, or a state holds an instant too far in the past for it (then read again; at once
  -- if check_words found that).
  if absolute or load_all(tiers, hi, lo, relative) and relative then
    load_all(tiers, hi, lo, false)
  end

  if op == 'r' or op == 'g' then
    for i = 1, tiers do
      local p, state = T_P[i], T_STATE[i]
      if op == 'g' or T_OLD[i] ~= nil then
        if p.kind == 'l' then
          if op == 'r' then
            write_log(i, state.n - p.algo.refund(state, p, now), nil)
          else
            write_log(i, state.n, p.algo.charge(state, p, now))
          end
        elseif op == 'r' then
          write_word(i, p.algo.refund(state, p, now))
        else
          write_word(i, p.algo.charge(state, p, now))
        end
      end
    end
    return { 1 }
  end

  -- the reply sized by its constructor for up to 3 tiers
  local reply
  if tiers == 1 then
    reply = { 1, 0, 0, 0 }
  elseif tiers == 2 then
    reply = { 1, 0, 0, 0, 0, 0, 0 }
  elseif tiers == 3 then
    reply = { 1, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
  else
    reply = { 1 }
  end
  local all = 1
  if op == 'q' then all = 0 end
  for i = 1, tiers do
    local p = T_P[i]
    local out = T_OUT[i]
    if out == nil then
      out = { 0, 0, 0 }
      T_OUT[i] = out
    end
    local next, span, ok, a, b, c, e, limbs = p.decide(T_STATE[i], p, now, false, out)
    T_NEXT[i], T_SPAN[i], T_OK[i] = next, span, ok
    if ok == 0 then all = 0 end
    local base = 3 * i - 1
    --@inline decision_fields
    reply[base], reply[base + 1], reply[base + 2] = a, b, c
  end
  reply[1] = all
  if all == 1 then
    if op == 'c' then
      for i = 1, tiers do
        local next = T_NEXT[i]
        if next then
          if T_P[i].kind == 'l' then
            write_log(i, T_STATE[i].n, next, T_SPAN[i])
          else
            write_word(i, next, T_SPAN[i])
          end
        end
      end
    end
  elseif op ~= 'p' then
    for i = 1, tiers do
      if T_OK[i] == 1 then
        -- the request did not count: an admitting tier reports its current state (a peek
        -- reports what each tier would decide)
        local p = T_P[i]
        local _, _, ok, a, b, c, e = p.algo.decide(T_STATE[i], p, now, true)
        put_decision(reply, i, ok, a, b, c, e)
      end
    end
  end
  return reply
end
end
