#!/usr/bin/env bash
# tollgate-redis's tests (against real redis-server processes the tests start on loopback:
# single node, 3-master cluster, faults, stalls, a leased fleet of processes) and
# tollgate-http's on a Redis store (http/tests/http_redis.rs, http_reload.rs) run with the
# workspace's tests. Here: the gateway example with its enforced rules' state in a real
# redis-server on loopback; it asserts the same totals as in-process and exits non-zero
# otherwise. redis-server comes from setup.d/redis.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
timeout 300 cargo run -p tollgate-http --example gateway -- --redis "redis://127.0.0.1:$port"
