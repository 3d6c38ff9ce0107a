-- Sliding window log: a sorted set bounded to L entries, one member per admitted permit.
-- All scores are 0; a member is 16 hex digits of its stamp followed by 16 of its sequence
-- number, so the set's lexicographic order is (stamp, sequence): stamps are recorded at
-- max(now, newest) and never decrease, so that is also recording order and rank r holds
-- permit number h - n + r, exactly like tollgate_core::LogRing's live slots. Mirrors
-- tollgate_core::SlidingWindowLog::decide (the pure log transition every executor runs).
-- Arguments (3): W, L (16-hex), cost (decimal).
ALGOS['log'] = function(key, a, pos, now, slack)
  local window = hex(a[pos])
  local limit_n = tonumber(a[pos + 1])
  local cost = tonumber(a[pos + 2])
  local n = redis.call('ZCARD', key)
  local function stamp_at(rank)
    local m = redis.call('ZRANGE', key, rank, rank)[1]
    return hex(string.sub(m, 1, 16)), m
  end
  local in_window_from = nil
  if cmp(now, window) >= 0 then in_window_from = sub(now, window) end
  local function in_window(t)
    return in_window_from == nil or cmp(t, in_window_from) > 0
  end
  -- the live entries are the newest min(n, L) (more only after the limit was lowered);
  -- binary search among them for the oldest one still in the window
  local live = math.min(n, limit_n)
  local lo, hi = n - live, n
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if in_window((stamp_at(mid))) then hi = mid else lo = mid + 1 end
  end
  local count = n - lo
  local newest, h = nil, ZERO
  if n > 0 then
    local t, m = stamp_at(n - 1)
    newest = t
    h = add(hex(string.sub(m, 17, 32)), ONE)
  end
  local function until_out(t)
    return span_to(add(t, window), now)
  end
  local limit = small(limit_n)
  if count + cost <= limit_n then
    local stamp = now
    if newest then stamp = max(newest, now) end
    local reset = ZERO
    if cost > 0 then
      reset = until_out(stamp)
    elseif newest then
      reset = until_out(newest)
    end
    local d = allow(small(limit_n - count - cost), reset)
    local write = nil
    if cost > 0 then
      write = function()
        local s = tohex(stamp)
        local seq = h
        local left = cost
        while left > 0 do
          -- ZADD in chunks, keeping unpack() far below Lua's C stack limit
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
        local excess = n + cost - limit_n
        if excess > 0 then redis.call('ZREMRANGEBYRANK', key, 0, excess - 1) end
        redis.call('PEXPIRE', key, ttl_ms(reset, slack))
      end
    end
    return d, write, pos + 3
  end
  local reset = ZERO
  if newest then reset = until_out(newest) end
  local retry = reset
  local blocking = n + cost - limit_n - 1
  if blocking >= n - live then retry = until_out((stamp_at(blocking))) end
  return deny(small(limit_n - count), reset, retry), nil, pos + 3
end
