#!/usr/bin/env bash
# Installs python3 for the scripts the test command runs (scripts/msrv-check.py, the
# bench-smoke stage's JSON check); standard library only. Idempotent: does nothing when
# python3 is already on PATH.
set -euo pipefail
if command -v python3 >/dev/null 2>&1; then
  exit 0
fi
need_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
export DEBIAN_FRONTEND=noninteractive
need_root apt-get update
need_root apt-get install -y --no-install-recommends python3
python3 --version
