#!/usr/bin/env bash
# loom models of tollgate's lock-free executors (loom-tests/): every interleaving of 2–3
# threads, up to LOOM_MAX_PREEMPTIONS preemptions (default 3), checked against a sequential
# oracle after each execution. Each model prints its execution count and wall time.
#
#   bash scripts/stages/loom.sh                 # all models
#   bash scripts/stages/loom.sh log_ring_wraps  # one model (cargo test filter)
#
# Includes loom-tests/tests/keyed_summary.rs (issue 16, item 1: debt-summary records racing
# from two shards, with a broken twin) and loom-tests/tests/keyed_races.rs (issue 16): a lookup racing a cuckoo move
# (peek, update_resident) and the exact-key pin handshake, each with a broken twin
# (should_panic) that switches the protecting step off through tollgate::LoomFault.
# And loom-tests/tests/keyed_borrow.rs: WhenFull::Refuse's quota borrow (Table::borrow) racing
# the lender shard's own insert (len ≤ capacity, the quota conserved), with a broken twin
# (should_panic) through tollgate::LoomFault::LendByLoadStore and LenderLoadStore.
# And loom-tests/tests/lease_cell.rs: tollgate::lease::LeaseCell, a spend racing a refill and
# an expiry, and a spend racing the cell's hand-off to another key, each with a broken twin
# (should_panic) through tollgate::lease::LeaseFault (spend as load + store; no owner
# re-check after a failed compare-and-swap).
#
# Built with --cfg tollgate_loom (which swaps loom's atomics into tollgate-core) in its own
# target dir, so it never invalidates the main build.
set -euo pipefail
cd "$(dirname "$0")/../.."

export RUSTFLAGS="--cfg tollgate_loom"
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target-loom}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
# The deliberately broken models panic by design; their backtraces are noise.
export RUST_BACKTRACE=0

start=$(date +%s)
# The code compiled only under the loom cfg (its atomics, its hooks) is linted too.
cargo clippy -p tollgate -p tollgate-loom-tests --tests -- -D warnings
cargo test --release -p tollgate-loom-tests -- --nocapture "$@"
echo "loom stage: $(( $(date +%s) - start )) s (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
