-- The policy store's script (what LuaScript::for_store assembles) under plain lua5.1, with a
-- stub `redis`, to count the instructions a decision costs on the server without Redis:
--
--   valgrind --tool=callgrind --callgrind-out-file=/dev/null lua5.1 bench/lua/store_harness.lua WORKLOAD N
--
-- from the repository root; WORKLOAD is gcra1 (one GCRA tier), tiers3 (GCRA + fixed window +
-- sliding window counter, as redis_bench's rows), float (redis_bench's float GCRA
-- baseline) or null (the stub alone: TIME, GET, SET). Instructions per decision: (Ir at N) - (Ir at 0), over N. The ARGV is what
-- store/call.rs builds for redis_bench's policies (server time, no TTL slack); the stub's clock
-- moves 80 µs per call over 10 000 keys, with expiry, so most GCRA keys have expired
-- between two visits as in the benchmark; every key is visited once before the measured
-- calls, so that these find the window tiers' states stored (as the benchmark does).
local workload, n = arg[1] or 'gcra1', tonumber(arg[2] or '1000')
local dir = 'redis/src/scripts/'

local function read(name)
  local f = assert(io.open(dir .. name, 'r'))
  local s = f:read('*a')
  f:close()
  return s
end

-- The stub server: string values with a millisecond expiry, TIME advancing per call.
local clock_us = 1764547200 * 1000000 -- 2025-12-01
local values, expiry = {}, {}
local function live(key)
  local e = expiry[key]
  if e and e <= clock_us / 1000 then values[key], expiry[key] = nil, nil end
  return values[key]
end
local commands = {
  TIME = function()
    return { tostring(math.floor(clock_us / 1000000)), tostring(clock_us % 1000000) }
  end,
  GET = function(key)
    local v = live(key)
    if v == nil then return false end
    return v
  end,
  SET = function(key, value, px, ms)
    values[key] = value
    expiry[key] = nil
    if px == 'PX' then expiry[key] = clock_us / 1000 + ms end
    return { ok = 'OK' }
  end,
  SETRANGE = function(key, offset, value)
    local v, o = live(key), tonumber(offset)
    values[key] = v:sub(1, o) .. value .. v:sub(o + #value + 1)
    return #values[key]
  end,
  PEXPIRE = function(key, ms)
    expiry[key] = clock_us / 1000 + ms
    return 1
  end,
}
redis = {
  call = function(cmd, ...) return commands[cmd](...) end,
  pcall = function(cmd, ...) return commands[cmd](...) end,
  error_reply = function(msg) return { err = msg } end,
}

local function hex16(x) return string.format('%016x', x) end
local function argx(x) return string.format('%x', x) end

local main, keys_of, argv
if workload == 'null' then
  -- the stub's own cost: the commands a GCRA decision sends, nothing else
  main = function(keys)
    redis.call('TIME')
    redis.call('GET', keys[1])
    redis.call('SET', keys[1], '0', 'PX', 3)
    return { 1 }
  end
  keys_of = function(c) return { 'n:' .. c } end
  argv = {}
elseif workload == 'float' then
  main = assert(loadstring('local KEYS, ARGV = ...\n' .. [[
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local emission = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + emission
local ahead = new_tat - now
if ahead > tolerance then
  return { 0, 0, math.ceil((ahead - tolerance) * 1000), math.ceil((tat - now) * 1000) }
end
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil(ahead * 1000))
return { 1, math.floor((tolerance - ahead) / emission), 0, math.ceil(ahead * 1000) }
]]))
  keys_of = function(c) return { 'fg:' .. c } end
  argv = { '0.000001', '1' }
else
  -- the EVAL body LuaScript::for_store assembles (its inline blocks expanded), without its
  -- last line (the call of main)
  local pipe = assert(io.popen('cargo run -q --release -p tollgate-bench --features redis '
    .. '--bin lua_script -- body'))
  local src = pipe:read('*a'):gsub('return main%(EVAL_KEYS, EVAL_ARGV%)%s*$', '')
  pipe:close()
  -- the library's top level runs once (FUNCTION LOAD), then every FCALL calls main; with
  -- HARNESS_EVAL=1 every call runs it all again, as EVAL / EVALSHA do
  local chunk = assert(loadstring(src .. '\nreturn main\n', 'store'))
  main = chunk()
  if os.getenv('HARNESS_EVAL') then main = function(k, a) return chunk()(k, a) end end
  local tiers = {}
  -- args.rs push_tier_spec: a spec per tier (the algorithm name, tag, cmax, arguments)
  -- GCRA: limit 1 000 000 per 1 s, burst = limit: T = 1 µs, tau = (burst - 1)·T
  tiers[1] = { 'gcra', 't' .. hex16(1000), argx(0), argx(1000), argx(999999000), argx(1000), argx(1) }
  if workload == 'tiers3' then
    local w, l = 60e9, 2 ^ 30
    tiers[2] = { 'fixed', 'f' .. hex16(w) .. hex16(l), argx(2 ^ 32 - 1), argx(w), argx(l), argx(1) }
    w, l = 3600e9, 1e6
    tiers[3] = { 'swc', 'c' .. hex16(w) .. hex16(l), argx(2 ^ 21 - 1), argx(w), argx(l), argx(1) }
  end
  -- the mode (check, no TTL slack, a deadline in server ms never reached: 2^53 / 1000,
  -- 13 digits as the store's are), the plan (the specs), no client time (the server's TIME)
  local specs = {}
  for i, t in ipairs(tiers) do specs[i] = table.concat(t, ' ') end
  argv = { 'c0 9007199254740', table.concat(specs, ';') }
  keys_of = function(c)
    local k = {}
    for i = 1, #tiers do k[i] = '{c' .. c .. '}:bp:default:' .. i end
    return k
  end
end
if os.getenv('HARNESS_ARGV') then print(table.concat(argv, ' | ')) end

local keys = {}
for c = 0, 9999 do keys[c] = keys_of(c) end
-- a first pass over every key (not counted: it runs at N = 0 too), so that the N measured
-- calls find the window tiers' states stored, as in the benchmark
for c = 0, 9999 do
  main(keys[c], argv)
  clock_us = clock_us + 80
end
local admitted = 0
for i = 1, n do
  local reply = main(keys[(i * 7919) % 10000], argv)
  assert(type(reply) == 'table' and reply.err == nil, reply.err)
  admitted = admitted + reply[1]
  clock_us = clock_us + 80
end
if os.getenv('HARNESS_REPLY') then
  local reply = main(keys[0], argv)
  for i = 1, #reply do reply[i] = tostring(reply[i]) end
  print(admitted, table.concat(reply, ' '))
end
