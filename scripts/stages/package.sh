#!/usr/bin/env bash
# Every crate meant for crates.io (each workspace member without `publish = false`) packages:
# its manifest is publishable (every dependency has a version, the metadata crates.io needs),
# and the archive holds its README, licenses and CHANGELOG. The crates are packaged together,
# so one that depends on another not yet on crates.io (tollgate-http on tollgate, ...) is
# resolved from cargo's local overlay of the ones packaged before it. `--no-verify`: the
# archives are not built again from scratch (that would rebuild every dependency, minutes
# per crate; the workspace build of the same sources is the tests stage's). About 5 s.
# Then a newcomer's path (below): README's `cargo add` lines and its axum quickstart, built
# outside the workspace against the archives, must serve 429s.
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
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
args=()
for c in "${crates[@]}"; do args+=(-p "$c"); done
# --allow-dirty: the check is about what would be published, not about the work tree
# (a run with uncommitted changes, or files the earlier stages wrote, must not fail it).
cargo package "${args[@]}" --no-verify --allow-dirty
for c in "${crates[@]}"; do
  crate_file=$(ls "$target"/package/"$c"-[0-9]*.crate | sort -V | tail -1)
  listing=$(tar -tzf "$crate_file")
  for f in README.md LICENSE-MIT LICENSE-APACHE CHANGELOG.md; do
    if ! grep -qx "[^/]*/$f" <<<"$listing"; then
      echo "$crate_file has no $f" >&2
      exit 1
    fi
  done
done
echo "package: ${crates[*]} packaged with README, licenses and CHANGELOG ($(( $(date +%s) - start )) s)"

# A newcomer's path: a fresh crate outside the workspace, README's `cargo add` lines run as
# they are written (each tollgate crate taken from the archive just packaged instead of
# crates.io) and README's axum quickstart as its main.rs (README's other Rust programs,
# the fleet's, as its bins); it must build, serve, and answer 429 once a client's burst is
# spent. The workspace's lock file pins the versions its build uses (offline, sharing its
# target directory); the crate lives at a fixed path in that directory, so that a second
# run finds its build current: seconds, once its dependencies' feature sets are built.
start=$(date +%s)
tmp="$target/newcomer-check"
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
rm -rf "$tmp"
mkdir -p "$tmp/crates"
for c in "${crates[@]}"; do
  tar -xzf "$(ls "$target"/package/"$c"-[0-9]*.crate | sort -V | tail -1)" -C "$tmp/crates"
done
# What `cargo new newcomer` writes, with `[workspace]`: a crate of its own, not a member of
# the workspace whose target directory it sits in.
mkdir -p "$tmp/newcomer/src"
printf '[package]\nname = "newcomer"\nversion = "0.1.0"\nedition = "2024"\n\n[dependencies]\n\n[workspace]\n' >"$tmp/newcomer/Cargo.toml"
python3 - "$tmp" <<'PY'
import pathlib, re, shlex, sys
tmp = pathlib.Path(sys.argv[1])
readme = pathlib.Path("README.md").read_text()
add = readme.split("\n## Add it", 1)[1].split("\n## ", 1)[0]
lines = [l.split("#", 1)[0].strip() for l in add.split("\n") if l.startswith("cargo add ")]
start = readme.split("\n## Quickstart", 1)[1]
programs = re.findall(r"^<!-- file: (\S+) -->\n```rust\n(.*?)^```$", start, re.S | re.M)
assert lines and programs, "README has no `cargo add` lines or no quickstart block"
# The quickstart is main.rs (run below); README's other programs are built as bins.
(tmp / "newcomer" / "src" / "main.rs").write_text(programs[0][1])
(tmp / "newcomer" / "src" / "bin").mkdir()
for path, body in programs[1:]:
    (tmp / "newcomer" / "src" / "bin" / pathlib.Path(path).name).write_text(body)
crates = {p.name.rsplit("-", 1)[0]: p for p in (tmp / "crates").iterdir()}
commands = []
for line in lines:
    words = shlex.split(line)[2:]
    flags = [w for w in words if w.startswith("-")]
    names = [w for w in words if not w.startswith("-")]
    # A `--features` value is the word after it.
    for i, w in enumerate(words):
        if w in ("--features", "-F") and i + 1 < len(words):
            flags.append(words[i + 1]); names.remove(words[i + 1])
    ours = [n for n in names if n in crates]
    theirs = [n for n in names if n not in crates]
    if theirs:
        commands.append(["cargo", "add", "--offline", *theirs, *flags])
    for n in ours:
        commands.append(["cargo", "add", "--offline", n, "--path", str(crates[n]), *flags])
patch = "\n[patch.crates-io]\n" + "".join(f'{n} = {{ path = "{p}" }}\n' for n, p in sorted(crates.items()))
manifest = tmp / "newcomer" / "Cargo.toml"
manifest.write_text(manifest.read_text() + patch)
(tmp / "commands").write_text("\n".join(shlex.join(c) for c in commands) + "\n")
PY
cp Cargo.lock "$tmp/newcomer/"
(
  cd "$tmp/newcomer"
  while read -r line; do
    eval "$line" >"$tmp/add.log" 2>&1 || { cat "$tmp/add.log" >&2; echo "newcomer: '$line' failed" >&2; exit 1; }
  done <"$tmp/commands"
  CARGO_TARGET_DIR="$target" cargo build -q --offline --bins
)
"$target/debug/newcomer" 127.0.0.1:0 >"$tmp/server.log" 2>&1 &
server_pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/^listening on //p' "$tmp/server.log")
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { cat "$tmp/server.log" >&2; echo "newcomer: the quickstart never said where it listens" >&2; exit 1; }
# Requests until the first 429 (python3 rather than curl: the test command needs no curl).
codes=$(python3 - "$addr" <<'PY'
import json, sys, urllib.error, urllib.request
codes = []
for _ in range(30):
    try:
        with urllib.request.urlopen(f"http://{sys.argv[1]}/", timeout=5) as r:
            codes.append(str(r.status))
    except urllib.error.HTTPError as e:
        codes.append(str(e.code))
        if e.code == 429:
            body = json.loads(e.read())
            if e.headers.get("retry-after") is None or body.get("status") != 429:
                codes.append("(no Retry-After or problem body)")
                break
            print(" ".join(codes))
            sys.exit(0)
        break
print(" ".join(codes))
sys.exit(1)
PY
) || { echo "newcomer: the quickstart answered $codes, no 429 with Retry-After and a problem body" >&2; exit 1; }
bins=$(ls "$tmp/newcomer/src/bin" | sed 's/\.rs$//' | tr '\n' ' ')
echo "newcomer: README's cargo add lines, its quickstart and its other programs (${bins% }) built outside the workspace; the quickstart at $addr answered $codes ($(( $(date +%s) - start )) s)"
