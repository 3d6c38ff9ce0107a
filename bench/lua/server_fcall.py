#!/usr/bin/env python3
"""Loads the store's function library into a running redis-server and makes N FCALLs with
the ARGV store_harness.lua prints (HARNESS_ARGV=1), over the same 10 000 clients' keys:

    python3 bench/lua/server_fcall.py PORT WORKLOAD N

from the repository root; WORKLOAD is gcra1, tiers3 or float (redis_bench's float GCRA
script, as a function). CLIENTS (environment, default 10 000) sets how many clients' keys
the calls go round; DEADLINES=distinct gives each client's calls a deadline (so a mode
string) of their own, the worst case for the function's cache of parsed modes. Plain sockets (RESP), no client library. See README.md."""
import os
import socket
import subprocess
import sys

port, workload, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])


def enc(*args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)


sock = socket.create_connection(('127.0.0.1', port))
f = sock.makefile('rb')


def read():
    line = f.readline()
    t = line[:1]
    if t in (b'+', b':'):
        return line[1:-2]
    if t == b'-':
        raise RuntimeError(line)
    if t == b'$':
        n = int(line[1:-2])
        return None if n < 0 else f.read(n + 2)[:-2]
    if t == b'*':
        return [read() for _ in range(int(line[1:-2]))]
    raise RuntimeError(line)


if workload == 'float':
    src = open('bench/src/bin/redis_bench.rs').read()
    body = src.split('const FLOAT_GCRA: &str = r#"', 1)[1].split('"#;', 1)[0]
    lib = "#!lua name=bf\nredis.register_function('bf', function(KEYS, ARGV)\n%s\nend)\n" % body
    fn, argv, keys_of = 'bf', ['0.000001', '1'], lambda c: ['fg:%d' % c]
else:
    # the library LuaScript::for_store assembles (its inline blocks expanded), or the one
    # in the file LUA_LIBRARY names (another version's, to compare)
    if os.environ.get('LUA_LIBRARY'):
        lib = open(os.environ['LUA_LIBRARY']).read()
    else:
        lua_script = ['cargo', 'run', '-q', '--release', '-p', 'tollgate-bench',
                      '--features', 'redis', '--bin', 'lua_script', '--', 'library']
        lib = subprocess.run(lua_script, capture_output=True, text=True, check=True).stdout
    fn = lib.split('\n', 1)[0].split('name=', 1)[1].strip()
    env = dict(os.environ, HARNESS_ARGV='1')
    out = subprocess.run(['lua5.1', 'bench/lua/store_harness.lua', workload, '0'], env=env,
                         capture_output=True, text=True, check=True).stdout
    argv = out.strip().split(' | ')
    tiers = len(argv[1].split(';'))
    keys_of = lambda c: ['{c%d}:bp:default:%d' % (c, i + 1) for i in range(tiers)]
sock.sendall(enc('FUNCTION', 'LOAD', 'REPLACE', lib))
read()
clients = int(os.environ.get('CLIENTS', '10000'))
if os.environ.get('DEADLINES') == 'distinct' and workload != 'float':
    # every client's calls with a mode string of their own (a deadline 1 ms apart): the
    # function's cache of parsed modes then misses on every call (the store's calls share
    # a mode within a ms; see "ARGV" in store.lua)
    op, ms = argv[0].split(' ')
    argv_of = lambda c: ['%s %d' % (op, int(ms) - c)] + argv[1:]
else:
    argv_of = lambda c: argv
calls = [enc('FCALL', fn, str(len(keys_of(0))), *keys_of(c), *argv_of(c)) for c in range(clients)]
i = 0
while i < n:
    m = min(50, n - i)
    sock.sendall(b''.join(calls[((i + j) * 7919) % clients] for j in range(m)))
    for _ in range(m):
        read()
    i += m
