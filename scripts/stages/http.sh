#!/usr/bin/env bash
# `tollgate::http` (feature `http`): lint it, run its tests (unit, doc, the loopback
# end-to-end suite in std/tests/http_layer.rs), then run the gateway example, which drives
# a real axum server with its own load generator and exits non-zero if any per-client
# total differs from what its rules dictate.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo clippy -p tollgate --features http --all-targets -- -D warnings
cargo test -p tollgate --features http
timeout 300 cargo run -p tollgate --features http --example gateway
