#!/usr/bin/env bash
# The optional `metrics` features of tollgate and tollgate-redis: lint them and run the
# tests that check their counters reach the `metrics` facade (the default `cargo test
# --workspace` leaves them off): decisions and reloads of a policy, a Redis store's
# failures (against a closed port: no server needed). And tollgate's `watch` feature (the
# rules-file watcher), also off by default.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo clippy -p tollgate --all-targets --features metrics -- -D warnings
cargo test -p tollgate --features metrics --test policy_metrics_feature
# The rules-file watcher (feature `watch`): real files, real notify; and its example.
cargo clippy -p tollgate --all-targets --features watch -- -D warnings
cargo test -p tollgate --features watch --test policy_watch
cargo test -p tollgate --features watch --doc policy::watch
cargo run -p tollgate --features watch --example watch_rules
cargo clippy -p tollgate-redis --all-targets --features metrics -- -D warnings
cargo test -p tollgate-redis --features metrics --test redis_events
