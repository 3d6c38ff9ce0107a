#!/usr/bin/env bash
# The Redis backend (feature `redis` of the tollgate crate): lints with the feature on, then
# its tests against real redis-server processes (single node, 3-master cluster, faults),
# which the tests start themselves on loopback, then the gateway example on a Redis store.
# redis-server comes from setup.d/redis.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo clippy -p tollgate --features redis --all-targets -- -D warnings
cargo test -p tollgate --features redis
# tollgate-http awaiting a Redis store (http/tests/http_redis.rs: two servers sharing one
# allowance, a paused Redis holding no worker, settlement and cancellation in Redis), then
# two admins reloading while checks wait on a paused Redis (http/tests/http_reload.rs), then
# the gateway example with its enforced rules' state in a real redis-server on loopback:
# it asserts the same totals as in-process and exits non-zero otherwise.
cargo clippy -p tollgate-http --features redis --example gateway --test http_redis --test http_reload -- -D warnings
cargo test -p tollgate-http --features redis --test http_redis --test http_reload
# The README's examples on a Redis store (its doctests live in tollgate-http).
cargo test -p tollgate-http --features redis --doc
port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
timeout 300 cargo run -p tollgate-http --features redis --example gateway -- --redis "redis://127.0.0.1:$port"
