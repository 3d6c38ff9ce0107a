#!/usr/bin/env python3
"""Checks that every workspace member's `rust-version` is true for its locked dependencies.

    python3 scripts/msrv-check.py            # a line per member; exit 1 if any claim is false
    python3 scripts/msrv-check.py --verbose  # every failing dependency, not the first 8

A crate's `rust-version` is a promise to its users: with the dependency versions in
Cargo.lock, that Rust builds it, with any set of its features, on any target. So for each
workspace member this reads `cargo metadata --format-version 1 --locked --all-features` and
walks the member's resolved graph (`resolve.nodes`, edge kinds from `dep_kinds`):

- normal and build dependencies count, optional ones included (`--all-features`: a user may
  enable any feature); dev-dependencies do not (they build the member's own tests, not what
  its users compile), at any depth;
- target-specific dependencies count on every target rustc knows (`rustc --print
  target-list`): an edge `cfg(windows)` is followed for the targets whose `rustc --print cfg`
  makes it true (the cfgs of each target are cached in cargo's target directory, keyed by
  `rustc -vV`). A build dependency or a proc-macro runs on the host, so what it pulls in
  counts for every target. Custom cfgs (`tokio_unstable`, `tollgate_loom`, `cfg(any())`) are
  off, except those a member lists as the cfgs it is built with:
  `[package.metadata.msrv-check] cfgs = ["tollgate_loom"]`;
- features are those cargo metadata resolves for the whole workspace at once, so a shared
  dependency may carry a feature only another member enables: conservative, never lenient.

A member fails if it states no `rust-version`, or if a package it depends on (a locked
crates.io package or another member) states a newer one; the report names each such
package, the Rust it needs, the targets it is needed on, and the chain that pulls it in.
Packages that state no `rust-version` cannot be checked and are skipped. What the member's
own code needs is not checked here: clippy's `incompatible_msrv` reads the same field and
flags std functions newer than it, but not language features or traits.
"""

import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys

# `rustc --print cfg` lines: `unix`, or `target_os="linux"`.
CFG_LINE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)(?:="(.*)")?$')
# Tokens of a `cfg(...)` predicate: identifiers, string literals and punctuation.
CFG_TOKEN = re.compile(r'\s*(?:([A-Za-z_][A-Za-z0-9_]*)|"((?:[^"\\]|\\.)*)"|([(),=]))')


def run(command):
    """Runs a command, returning its standard output; exits with its error on failure."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        sys.exit(f"msrv-check: `{' '.join(command)}` failed (exit {done.returncode})")
    return done.stdout


def parse_version(text):
    """`"1.88"` or `"1.87.0"` as a comparable `(1, 88, 0)`."""
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def target_cfgs(rustc, target):
    """The set of cfgs `rustc` sets for a target: names, and `(key, value)` pairs."""
    cfgs = set()
    for line in run([rustc, "--print", "cfg", "--target", target]).splitlines():
        match = CFG_LINE.match(line.strip())
        if match:
            name, value = match.groups()
            cfgs.add(name if value is None else (name, value))
    return cfgs


def parse_cfg(text):
    """A `cfg(...)` string as a nested tuple: `("name", n)`, `("eq", k, v)`, `("all", [...])`,
    `("any", [...])`, `("not", p)`, `("bool", b)`."""
    tokens, position = [], 0
    while position < len(text):
        match = CFG_TOKEN.match(text, position)
        if not match or match.end() == position:
            if text[position:].strip():
                raise ValueError(f"cannot parse cfg {text!r} at {position}")
            break
        tokens.append(match.groups())
        position = match.end()

    def expect(punct, at):
        if at >= len(tokens) or tokens[at][2] != punct:
            raise ValueError(f"cannot parse cfg {text!r}: expected {punct!r}")
        return at + 1

    def predicate(at):
        name = tokens[at][0] if at < len(tokens) else None
        if name is None:
            raise ValueError(f"cannot parse cfg {text!r}: expected a name")
        at += 1
        if name in ("all", "any", "not") and at < len(tokens) and tokens[at][2] == "(":
            at, items = at + 1, []
            while at < len(tokens) and tokens[at][2] != ")":
                item, at = predicate(at)
                items.append(item)
                if at < len(tokens) and tokens[at][2] == ",":
                    at += 1
                elif at < len(tokens) and tokens[at][2] != ")":
                    raise ValueError(f"cannot parse cfg {text!r}: expected ',' or ')'")
            at = expect(")", at)
            if name == "not":
                if len(items) != 1:
                    raise ValueError(f"cannot parse cfg {text!r}: not() takes one predicate")
                return ("not", items[0]), at
            return (name, items), at
        if at < len(tokens) and tokens[at][2] == "=":
            value = tokens[at + 1][1] if at + 1 < len(tokens) else None
            if value is None:
                raise ValueError(f"cannot parse cfg {text!r}: expected a string after =")
            return ("eq", name, value), at + 2
        if name in ("true", "false"):
            return ("bool", name == "true"), at
        return ("name", name), at

    if not tokens or tokens[0][0] != "cfg":
        raise ValueError(f"cannot parse cfg {text!r}: expected cfg(...)")
    tree, at = predicate(expect("(", 1))
    if expect(")", at) != len(tokens):
        raise ValueError(f"cannot parse cfg {text!r}: text after the closing parenthesis")
    return tree


def holds(tree, cfgs):
    """Whether a parsed cfg predicate is true under a set of cfgs."""
    kind = tree[0]
    if kind == "name":
        return tree[1] in cfgs
    if kind == "eq":
        return (tree[1], tree[2]) in cfgs
    if kind == "all":
        return all(holds(item, cfgs) for item in tree[1])
    if kind == "any":
        return any(holds(item, cfgs) for item in tree[1])
    if kind == "not":
        return not holds(tree[1], cfgs)
    if kind == "bool":
        return tree[1]
    raise ValueError(f"unknown cfg predicate {tree!r}")


def all_target_cfgs(rustc, cache_dir):
    """Each target rustc knows, with its cfgs. About 300 `rustc --print cfg` runs (several
    seconds), so the answer is kept in `cache_dir`, keyed by `rustc -vV`."""
    version = run([rustc, "-vV"])
    key = hashlib.sha256(version.encode()).hexdigest()[:16]
    cache = os.path.join(cache_dir, f"msrv-check-target-cfgs-{key}.json")
    try:
        with open(cache, encoding="utf-8") as file:
            stored = json.load(file)
        return {name: {c if isinstance(c, str) else tuple(c) for c in cfgs}
                for name, cfgs in stored.items()}
    except (OSError, ValueError):
        pass
    names = run([rustc, "--print", "target-list"]).split()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        found = dict(zip(names, pool.map(lambda t: target_cfgs(rustc, t), names)))
    os.makedirs(cache_dir, exist_ok=True)
    with open(cache + ".tmp", "w", encoding="utf-8") as file:
        json.dump({name: sorted(cfgs, key=str) for name, cfgs in found.items()}, file)
    os.replace(cache + ".tmp", cache)
    return found


class Targets:
    """Every target rustc knows, as bit positions, and which of them each edge target matches."""

    def __init__(self, cfgs_by_target):
        self.names = sorted(cfgs_by_target)
        self.cfgs = [cfgs_by_target[name] for name in self.names]
        self.all = (1 << len(self.names)) - 1
        self.cache = {}

    def matching(self, target, extra_cfgs):
        """The bit mask of targets on which a `dep_kinds` target (None, a triple, or a
        `cfg(...)`) is active, with a member's extra cfgs set."""
        if target is None:
            return self.all
        key = (target, extra_cfgs)
        if key not in self.cache:
            if target.startswith("cfg("):
                tree = parse_cfg(target)
                mask = 0
                for bit, cfgs in enumerate(self.cfgs):
                    if holds(tree, cfgs | extra_cfgs):
                        mask |= 1 << bit
            else:
                mask = self.all if target not in self.names else 1 << self.names.index(target)
            self.cache[key] = mask
        return self.cache[key]

    def describe(self, mask):
        """`all targets`, or how many and the first few names."""
        if mask == self.all:
            return "all targets"
        names = [name for bit, name in enumerate(self.names) if mask >> bit & 1]
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        return f"{len(names)} of {len(self.names)} targets ({shown})"


def reach(root, nodes, packages, targets, extra_cfgs):
    """For each package in the root's normal + build graph: the mask of targets it is built
    for, and the package that first pulled it in (for the chain)."""
    built_for = {root: targets.all}
    pulled_by = {root: None}
    pending = collections.deque([root])
    while pending:
        node = pending.popleft()
        mask = built_for[node]
        for dep in nodes[node]["deps"]:
            child = dep["pkg"]
            runs_on_host = any(t["kind"] == "proc-macro" for t in packages[child]["targets"])
            child_mask = 0
            for kind in dep["dep_kinds"]:
                if kind["kind"] == "dev":
                    continue
                active = mask & targets.matching(kind["target"], extra_cfgs)
                if kind["kind"] == "build" or runs_on_host:
                    # Built for and run on the host, which may be any target.
                    active = targets.all if active else 0
                child_mask |= active
            if child_mask & ~built_for.get(child, 0):
                built_for[child] = built_for.get(child, 0) | child_mask
                pulled_by.setdefault(child, node)
                pending.append(child)
    return built_for, pulled_by


def depth(node, pulled_by):
    """How many links the chain from the member to a package has."""
    links = 0
    while pulled_by[node] is not None:
        node, links = pulled_by[node], links + 1
    return links


def chain(node, pulled_by, packages):
    """`a -> b 1.2.3 -> c 0.4.0`: how the member reaches a package."""
    links = []
    while node is not None:
        links.append(node)
        node = pulled_by[node]
    links.reverse()
    first = packages[links[0]]["name"]
    rest = [f"{packages[n]['name']} {packages[n]['version']}" for n in links[1:]]
    return " -> ".join([first] + rest)


def check_member(member, nodes, packages, targets, verbose):
    """Whether a member's `rust-version` holds for its dependencies, and the report lines."""
    package = packages[member]
    name, stated = package["name"], package["rust_version"]
    settings = (package.get("metadata") or {}).get("msrv-check") or {}
    extra_cfgs = frozenset(settings.get("cfgs", []))
    built_for, pulled_by = reach(member, nodes, packages, targets, extra_cfgs)
    # Newest first; among equals, the nearest (the one that pulls the others in) first.
    deps = sorted(((parse_version(packages[d]["rust_version"]), d) for d in built_for
                   if d != member and packages[d]["rust_version"]),
                  key=lambda vd: (tuple(-x for x in vd[0]), depth(vd[1], pulled_by),
                                  packages[vd[1]]["name"]))
    needed = packages[deps[0][1]]["rust_version"] if deps else "any Rust"
    count = len(built_for) - 1
    with_cfgs = f" (built with --cfg {' --cfg '.join(sorted(extra_cfgs))})" if extra_cfgs else ""

    def line(dep):
        dep_package = packages[dep]
        return (f"         {dep_package['name']} {dep_package['version']} needs "
                f"{dep_package['rust_version']} on {targets.describe(built_for[dep])}: "
                f"{chain(dep, pulled_by, packages)}")

    if stated is None:
        return False, [f"  FAIL {name}: states no rust-version; its {count} dependencies"
                       f"{with_cfgs} need {needed}"] + [line(d) for _, d in deps[:1]]
    newer = [dep for version, dep in deps if version > parse_version(stated)]
    if not newer:
        newest = packages[deps[0][1]] if deps else None
        head = f"  ok   {name} {stated}: {count} dependencies{with_cfgs}, " + (
            f"the most demanding needs {needed} ({newest['name']} {newest['version']})"
            if newest else "none states a rust-version")
        return True, [head] + ([line(d) for _, d in deps[:5]] if verbose else [])
    shown = newer if verbose else newer[:8]
    lines = [f"  FAIL {name} says rust-version {stated}, but its locked dependencies"
             f"{with_cfgs} need {needed} ({len(newer)} of {count} need more than {stated}):"]
    lines += [line(dep) for dep in shown]
    if len(shown) < len(newer):
        rest = [packages[dep]["rust_version"] for dep in newer[len(shown):]]
        span = rest[0] if rest[0] == rest[-1] else f"{rest[-1]} to {rest[0]}"
        lines.append(f"         ... and {len(rest)} more, needing {span} (--verbose lists them)")
    return False, lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true",
                        help="list every dependency that fails, and the newest ones of a member"
                        " that passes")
    args = parser.parse_args()

    cargo = os.environ.get("CARGO", "cargo")
    rustc = os.environ.get("RUSTC", "rustc")
    metadata = json.loads(run([cargo, "metadata", "--format-version", "1", "--locked",
                               "--all-features"]))
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    targets = Targets(all_target_cfgs(rustc, metadata["target_directory"]))
    members = sorted(metadata["workspace_members"], key=lambda i: packages[i]["name"])
    print(f"msrv-check: {len(members)} members, {len(packages)} locked packages, "
          f"{len(targets.names)} targets; normal + build dependencies, all features")

    failed = 0
    for member in members:
        ok, lines = check_member(member, nodes, packages, targets, args.verbose)
        failed += not ok
        print("\n".join(lines))
    if failed:
        print(f"msrv-check: {failed} member(s) state a rust-version their locked dependencies "
              "do not build with: raise it to what they need (and say so in the crate's "
              "CHANGELOG), or lock an older dependency")
        sys.exit(1)


if __name__ == "__main__":
    main()
