#!/usr/bin/env bash
# The optional `metrics` features of tollgate and tollgate-redis: lint them and run the
# tests that check their counters reach the `metrics` facade (the default `cargo test
# --workspace` leaves them off): decisions and reloads of a policy, a Redis store's
# failures (against a closed port: no server needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo clippy -p tollgate --all-targets --features metrics -- -D warnings
cargo test -p tollgate --features metrics --test policy_metrics_feature
cargo clippy -p tollgate-redis --all-targets --features metrics -- -D warnings
cargo test -p tollgate-redis --features metrics --test redis_events
