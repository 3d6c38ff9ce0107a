#!/usr/bin/env bash
# tollgate-http: its lints and tests (unit, doc, the loopback end-to-end suite in
# http/tests/http_layer.rs) run with the workspace; here, with every feature, the metrics
# scrape (http/tests/metrics.rs), the gRPC
# tests (a real tonic server and client on loopback: http/tests/grpc.rs) and the copyable
# examples run as their own processes (http/tests/examples.rs: axum, hyper, tonic), then the gateway
# example, which drives a real axum server with its own load generator and exits non-zero
# if any per-client total (or, with `metrics`, a counter scraped from its /metrics)
# differs from what its rules dictate.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo clippy -p tollgate-http --all-features --all-targets -- -D warnings
cargo build -p tollgate-http --features tonic --examples
cargo test -p tollgate-http --all-features --test grpc --test examples --test metrics
timeout 300 cargo run -p tollgate-http --features metrics --example gateway
