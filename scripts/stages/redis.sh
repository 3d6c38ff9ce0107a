#!/usr/bin/env bash
# The Redis backend (feature `redis` of the tollgate crate): lints with the feature on, then
# its tests against real redis-server processes (single node, 3-master cluster, faults),
# which the tests start themselves on loopback. redis-server comes from setup.d/redis.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo clippy -p tollgate --features redis --all-targets -- -D warnings
cargo test -p tollgate --features redis
