#!/usr/bin/env bash
# The documentation builds without a warning, every feature on (broken links, missing docs);
# README's and docs/'s code blocks are the example files they name, with no hidden lines,
# each fact has one home, ARCHITECTURE.md names only what exists, the rules reference has
# every field and every relative link resolves (scripts/check-docs.py, under a second);
# and the pictures docs/algorithms.md shows are current: the tour example
# writes them again into a temporary directory and they must equal the committed
# docs/img/tour/ byte for byte.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 scripts/check-docs.py
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run --release -q -p tollgate-core --example tour -- --svg "$tmp" >/dev/null
if ! diff -r "$tmp" docs/img/tour; then
  echo "docs/img/tour/ is out of date with the tour example: run scripts/tour-svgs.sh and commit the result" >&2
  exit 1
fi
echo "docs/img/tour: $(ls "$tmp" | wc -l) pictures current"
