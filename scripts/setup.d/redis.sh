#!/usr/bin/env bash
# Installs redis-server for the Redis backend's tests (redis/tests/redis_*.rs start their own
# servers on loopback). Idempotent: does nothing when redis-server is already on PATH.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
need_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
export DEBIAN_FRONTEND=noninteractive
need_root apt-get update
need_root apt-get install -y --no-install-recommends redis-server
# The package may start a system instance on 6379; the tests never use it, so stop it
# where a service manager exists (the tests pick free ports either way).
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
  need_root systemctl stop redis-server || true
fi
redis-server --version
