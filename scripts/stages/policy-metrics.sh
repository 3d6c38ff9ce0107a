#!/usr/bin/env bash
# The policy layer's optional `metrics` feature: lint it and run the test that checks the
# counters reach the `metrics` facade (the default `cargo test --workspace` leaves it off).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo clippy -p tollgate --all-targets --features metrics -- -D warnings
cargo test -p tollgate --features metrics --test policy_metrics_feature
