#!/usr/bin/env bash
# Every crate meant for crates.io (each workspace member without `publish = false`) packages:
# its manifest is publishable (every dependency has a version, the metadata crates.io needs),
# and the archive holds its README, licenses and CHANGELOG. The crates are packaged together,
# so one that depends on another not yet on crates.io (tollgate-http on tollgate, ...) is
# resolved from cargo's local overlay of the ones packaged before it. `--no-verify`: the
# archives are not built again from scratch (that would rebuild every dependency, minutes
# per crate; the workspace build of the same sources is the tests stage's). About 5 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
mapfile -t crates < <(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
meta = json.load(sys.stdin)
members = set(meta["workspace_members"])
for p in meta["packages"]:
    if p["id"] in members and p["publish"] != []:
        print(p["name"])
')
[ "${#crates[@]}" -gt 0 ] || { echo "no publishable crate found" >&2; exit 1; }
args=()
for c in "${crates[@]}"; do args+=(-p "$c"); done
# --allow-dirty: the check is about what would be published, not about the work tree
# (a run with uncommitted changes, or files the earlier stages wrote, must not fail it).
cargo package "${args[@]}" --no-verify --allow-dirty
for c in "${crates[@]}"; do
  crate_file=$(ls target/package/"$c"-*.crate | sort -V | tail -1)
  listing=$(tar -tzf "$crate_file")
  for f in README.md LICENSE-MIT LICENSE-APACHE CHANGELOG.md; do
    if ! grep -qx "[^/]*/$f" <<<"$listing"; then
      echo "$crate_file has no $f" >&2
      exit 1
    fi
  done
done
echo "package: ${crates[*]} packaged with README, licenses and CHANGELOG ($(( $(date +%s) - start )) s)"
