#!/usr/bin/env bash
# tollgate-http: its lints and tests (unit, doc, the loopback end-to-end suite in
# http/tests/http_layer.rs) run with the workspace; here, with the `tonic` feature, the gRPC
# tests (a real tonic server and client on loopback: http/tests/grpc.rs) and the copyable
# examples run as their own processes (http/tests/examples.rs: axum, hyper, tonic), then the gateway
# example, which drives a real axum server with its own load generator and exits non-zero
# if any per-client total differs from what its rules dictate.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo clippy -p tollgate-http --features tonic --all-targets -- -D warnings
cargo build -p tollgate-http --features tonic --examples
cargo test -p tollgate-http --features tonic --test grpc --test examples
timeout 300 cargo run -p tollgate-http --example gateway
