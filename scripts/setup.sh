#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine with rustup.
# Idempotent: each step checks first, so a warm machine pays almost nothing.
set -euo pipefail

need_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# no_std targets for the build proof (see core/src/lib.rs "Targets without 64-bit atomics").
installed_targets=$(rustup target list --installed)
for target in thumbv7em-none-eabihf riscv32imac-unknown-none-elf thumbv6m-none-eabi; do
  grep -qx "$target" <<<"$installed_targets" || rustup target add "$target"
done

# Stable components used by the lint stage.
rustup component list --installed | grep -q '^clippy' || rustup component add clippy
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt

# Extra stages add their own installs in scripts/setup.d/*.sh (nightly + miri, cargo-fuzz,
# redis-server, ...).
if [ -d scripts/setup.d ]; then
  for step in scripts/setup.d/*.sh; do
    [ -e "$step" ] || continue
    echo "== setup: $step"
    bash "$step"
  done
fi
