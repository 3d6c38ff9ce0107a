#!/usr/bin/env bash
# Regenerates the pictures docs/algorithms.md shows, docs/img/tour/<scenario>.svg, from the tour example
# (core/examples/tour.rs). Run from anywhere; commit the result. The docs stage
# (scripts/stages/docs.sh) fails while the committed pictures differ from what this writes.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf docs/img/tour
cargo run --release -q -p tollgate-core --example tour -- --svg docs/img/tour >/dev/null
ls -l docs/img/tour
