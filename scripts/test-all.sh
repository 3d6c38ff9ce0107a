#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh Debian machine:
#   bash scripts/test-all.sh
# It installs what it needs (scripts/setup.sh), then runs lints, every crate's tests, the
# no_std target builds, and the extra stages in scripts/stages/*.sh (loom, fuzz, miri, the
# firmware on an emulated Cortex-M, the docs' pictures, blocks and names being current, the crates packaging, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# Disk: a full run builds the workspace several ways (features, loom, miri, fuzz). Without
# incremental caches and with line tables only (file:line in backtraces, no variable info),
# it writes ~3 GB instead of ~8 GB; a machine with little free disk failed the link of a
# test binary (ld: signal 7) before this. Set either variable to override.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
export CARGO_PROFILE_TEST_DEBUG="${CARGO_PROFILE_TEST_DEBUG:-line-tables-only}"
start=$(date +%s)
stage() {
  echo
  echo "=== $* ($(( $(date +%s) - start )) s; free disk: $(df -h . | awk 'NR==2 {print $4}'))"
}

stage "setup"
bash scripts/setup.sh

stage "format"
cargo fmt --all -- --check

# Each crate's rust-version against its locked dependencies (under a second once the
# per-target cfgs are cached in target/; a fresh clone spends ~5 s asking rustc for them).
stage "msrv"
python3 scripts/msrv-check.py

stage "clippy"
cargo clippy --workspace --all-targets -- -D warnings

stage "tests"
cargo test --workspace

stage "no_std builds"
cargo build -p tollgate-core --target thumbv7em-none-eabihf
cargo build -p tollgate-core --target riscv32imac-unknown-none-elf
cargo build -p tollgate-core --target thumbv6m-none-eabi --features critical-section
# The firmware example (thumbv7em-none-eabihf too) is built and booted on an emulated
# Cortex-M by scripts/stages/firmware-qemu.sh.

for s in scripts/stages/*.sh; do
  [ -e "$s" ] || continue
  stage "$s"
  bash "$s"
done

stage "all stages passed"
