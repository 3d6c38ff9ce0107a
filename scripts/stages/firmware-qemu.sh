#!/usr/bin/env bash
# The firmware example (firmware/) on a Cortex-M: lint it for its target, boot it on QEMU's
# mps2-an386 board (Cortex-M4F; the runner is in .cargo/config.toml, qemu-system-arm comes
# from setup.d/qemu.sh), where a SysTick handler and main check one static limiter, then
# run the same trace simulated on the host. The firmware asserts its counts and exits QEMU
# non-zero if one is off; this script also fails on a timeout (a hang, e.g. a handler
# spinning on a lock main holds) and re-checks the printed total.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=thumbv7em-none-eabihf
cargo clippy -p tollgate-firmware --target "$target" -- -D warnings
cargo build -p tollgate-firmware --target "$target"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# timeout signals its whole process group, so QEMU (cargo's child) is stopped too.
timeout 60 cargo run -q -p tollgate-firmware --target "$target" | tee "$log" || status=$?
if [ "$status" != 0 ]; then
  echo "firmware-qemu: the firmware failed under QEMU (exit $status; 124 = timed out)" >&2
  exit 1
fi
if ! grep -qx 'firmware: ok' "$log"; then
  echo "firmware-qemu: no 'firmware: ok' in QEMU's output" >&2
  exit 1
fi
counts=$(sed -n 's/.*admitted \([0-9]*\) of \([0-9]*\) expected.*/\1 \2/p' "$log")
read -r admitted expected <<<"$counts"
if [ -z "${expected:-}" ] || [ "$admitted" != "$expected" ]; then
  echo "firmware-qemu: admitted '${admitted:-?}' of '${expected:-?}' expected" >&2
  exit 1
fi

cargo run -q -p tollgate-firmware
