#!/usr/bin/env bash
# Bounded fuzz run of every cargo-fuzz target in fuzz/ (nightly, libFuzzer + sanitizer
# instrumentation, debug assertions on). Fails on the first crash, with the failing
# input's Debug form and libFuzzer's report.
#
#   bash scripts/stages/fuzz.sh              # every target, FUZZ_SECONDS each (default 10)
#
# 10 s per target keeps the whole test command inside its 45-minute budget (11 targets).
#   FUZZ_SECONDS=300 bash scripts/stages/fuzz.sh gcra any_state
#
# Inputs per target: corpus/T/seeds (committed, small), regressions/T (committed inputs
# that once crashed: replayed first), corpus/T/generated (what this machine found so far;
# git-ignored). New inputs go to generated. A crash is saved under fuzz/artifacts/T/.
# Needs scripts/setup.d/nightly.sh (nightly toolchain, cargo-fuzz).
set -euo pipefail
cd "$(dirname "$0")/../../fuzz"

seconds="${FUZZ_SECONDS:-10}"
if [ "$#" -gt 0 ]; then targets=("$@"); else mapfile -t targets < <(cargo +nightly fuzz list); fi

start=$(date +%s)
# One build for every target (cold: a few minutes on 2 cores).
cargo +nightly fuzz build
echo "fuzz build: $(( $(date +%s) - start )) s"

log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT
summary=()
for target in "${targets[@]}"; do
  inputs=("corpus/$target/generated" "corpus/$target/seeds")
  mkdir -p "corpus/$target/generated"
  [ -d "regressions/$target" ] && inputs+=("regressions/$target")
  log="$log_dir/$target.log"
  if ! cargo +nightly fuzz run "$target" "${inputs[@]}" -- \
      -max_total_time="$seconds" -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    # libFuzzer's report, the panic message and cargo-fuzz's Debug form of the input.
    grep -vE '^ +([0-9]+: |at )' "$log" | tail -n 60
    echo "fuzz $target: FAILED"
    exit 1
  fi
  runs=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n 1 | awk '{print $2}')
  line="fuzz $target: ${runs:-?} executions in ${seconds} s"
  echo "$line"
  summary+=("$line")
done
echo
printf '%s\n' "${summary[@]}"
echo "fuzz stage: $(( $(date +%s) - start )) s"
