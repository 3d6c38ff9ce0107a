#!/usr/bin/env bash
# Install step for the verification stages (scripts/stages/{miri,fuzz}.sh): a nightly
# toolchain with miri and rust-src, miri's sysroot, and cargo-fuzz. Idempotent: each
# piece is checked first, so a warm machine pays a few hundred milliseconds.
set -euo pipefail

# Pinned so a fresh machine gets the version this script was tested with.
CARGO_FUZZ_VERSION=0.13.2

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal -c miri,rust-src
fi

installed=$(rustup component list --installed --toolchain nightly)
for component in miri rust-src; do
  grep -q "^$component" <<<"$installed" || rustup component add --toolchain nightly "$component"
done

# miri builds its own sysroot once per toolchain; doing it here keeps the stage's time the
# tests' own. Quiet unless it fails.
if ! out=$(cargo +nightly miri setup 2>&1); then
  echo "$out" >&2
  exit 1
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
