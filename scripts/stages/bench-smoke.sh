#!/usr/bin/env bash
# Benchmark smoke test: the `compare` command of docs/benchmarks.md works from a fresh clone
# and its JSON holds every case docs/benchmarks.md and issue 6 name; `http_compare` (the HTTP
# layer against tower_governor) prints its three rows; `http_cold` and `http_loopback` (the
# same from a cold cache and over loopback, a few calls each) print a figure per contender.
# Figures are not checked (noisy machine); the criterion benches are only compiled, with the
# `http` feature (the clippy stage already type-checks them without it: a second optimised
# build of the crate took ~2 min).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo bench -p tollgate-bench --features http --no-run
cargo run --release -p tollgate-bench --bin compare -- --quick --json target/compare.json
python3 - target/compare.json <<'PY'
import json, sys
cases = {c["name"]: c for c in json.load(open(sys.argv[1]))["cases"]}
required = ["direct_allow", "direct_deny", "keyed_1key", "keyed_100k", "keyed_1m",
            "keyed_100k_2threads", "keyed_insert", "memory_u64_1m", "memory_ipv6_1m",
            "memory_string_1m"]
missing = [n for n in required if n not in cases]
bad = [n for n in required if n in cases and not isinstance(cases[n]["tollgate"], (int, float))]
units = [n for n, c in cases.items() if c["unit"] not in ("ns", "ns_p50", "ns_p99", "bytes_per_key")]
if missing or bad or units:
    sys.exit(f"compare.json: missing {missing}, no tollgate figure {bad}, bad unit {units}")
print(f"compare.json: {len(cases)} cases, all {len(required)} required present")
PY
cargo run --release -p tollgate-bench --features http --bin http_compare -- --quick | tee target/http_compare.txt
for row in http_admit_draft11 http_admit_no_headers http_deny; do
    grep -Eq "^$row +ns +[0-9.]+ +[0-9.]+" target/http_compare.txt \
        || { echo "http_compare: no figures for $row" >&2; exit 1; }
done
cargo run --release -p tollgate-bench --features http --bin http_cold -- 1 1 | tee target/http_cold.txt
cargo run --release -p tollgate-bench --features http --bin http_loopback -- 200 | tee target/http_loopback.txt
for row in none tollgate_draft11 governor_headers tollgate_no_headers governor; do
    grep -Eq "^$row +[0-9]+ ns" target/http_cold.txt \
        || { echo "http_cold: no figure for $row" >&2; exit 1; }
    grep -Eq "^$row +median +[0-9.]+ µs" target/http_loopback.txt \
        || { echo "http_loopback: no figure for $row" >&2; exit 1; }
done
