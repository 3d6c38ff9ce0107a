#!/usr/bin/env bash
# Installs qemu-system-arm for the firmware stage (scripts/stages/firmware-qemu.sh boots
# the firmware example on QEMU's mps2-an386 board). Idempotent: does nothing when
# qemu-system-arm is already on PATH.
set -euo pipefail
if command -v qemu-system-arm >/dev/null 2>&1; then
  exit 0
fi
need_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
export DEBIAN_FRONTEND=noninteractive
need_root apt-get update
need_root apt-get install -y --no-install-recommends qemu-system-arm
qemu-system-arm --version | head -n 1
