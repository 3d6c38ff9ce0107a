#!/usr/bin/env python3
"""The documentation checks of the docs stage (scripts/stages/docs.sh); under a second.

1. Code blocks are real files. A fenced block right after a line `<!-- file: PATH -->` in
   README.md or docs/*.md must be PATH's content byte for byte (the files are examples and
   test files, built and run by the test command). Every `rust` block of README.md must
   carry such a line: README is not compiled as a doctest, its programs are those files.
2. No hidden lines. No Rust block of README.md or docs/*.md has a doctest-hidden line
   (`# ...`): GitHub and crates.io render them raw, so a reader must see the whole program.
3. One home per fact. Every figure README's "Why tollgate" table quotes is on
   docs/benchmarks.md (it is measured there); the MSRV table of README.md agrees with each crate's `rust-version`,
   and no other page or section (docs/ but benchmarks.md, ARCHITECTURE.md, CONTRIBUTING.md,
   a crate's landing page) names a Rust release; the default header draft is stated in
   docs/http.md only; the lease bound (`P × …`, `P times …`) in docs/redis.md only
   (benchmarks.md quotes its measured instance); no page names a
   default clock other than `MonotonicClock` (the rustdoc of `tollgate::clock` is its home).
   The homes agree with the code: docs/http.md's default draft (and any in tollgate-http's
   rustdoc) is `HeaderStyle`'s `#[default]`, the clock `tollgate::clock` calls the default
   is `RateLimiter`'s default clock parameter.
   README.md is for users: no instruction counts, commit hashes or issue numbers.
4. ARCHITECTURE.md is true. Every file path it names in backticks exists in the tree (a
   short path such as `store/tier/take.rs` must be the end of a tracked file's path), and
   every Rust name it gives (`Type`, `Type::method`, `function`) is defined somewhere in the
   crates' sources (a Lua `function` counts for the scripts it names).

5. The rules reference is whole. Every field of the rules file's structs (those of
   `std/src/policy/config.rs` that refuse unknown fields) has a row in docs/rules.md's
   "The rules file, field by field".
6. Links resolve. Every relative link of docs/, ARCHITECTURE.md, CONTRIBUTING.md and the
   CHANGELOGs, and every link into the repository (`{repository}/blob/main/PATH`), names a
   file that exists and, with `#anchor`, a heading of that page (GitHub's anchors: lower
   case, punctuation dropped, spaces as hyphens). README's links into the repository are
   absolute: README is each crate's crates.io page, where cargo ships it at the crate's
   root and a relative link resolves against the crate's folder.

Exits non-zero with one line per problem.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
problems: list[str] = []


def problem(where: str, message: str) -> None:
    problems.append(f"{where}: {message}")


def pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!-- file: (\S+) -->\s*\Z")


def blocks(text: str):
    """(line number, info string, body, marked file or None) of each fenced block."""
    for m in FENCE.finditer(text):
        before = text[: m.start()]
        line = before.count("\n") + 1
        marker = MARKER.search(before[-200:])
        yield line, m.group(1).strip(), m.group(2), marker.group(1) if marker else None


def check_blocks() -> None:
    for page in pages():
        rel = page.relative_to(ROOT)
        for line, info, body, marked in blocks(page.read_text()):
            where = f"{rel}:{line}"
            is_rust = info.split(",")[0] == "rust"
            if marked is not None:
                path = ROOT / marked
                if not path.is_file():
                    problem(where, f"the block's file {marked} does not exist")
                elif path.read_text() != body:
                    problem(where, f"the block differs from {marked} (copy the file into the page)")
            elif is_rust and page.name == "README.md":
                problem(where, "a rust block of README must be a file: precede it with <!-- file: PATH -->")
            if is_rust:
                for n, text in enumerate(body.split("\n")):
                    if text == "#" or text.startswith("# "):
                        problem(f"{rel}:{line + 1 + n}", "a doctest-hidden line; show the whole program")


def cargo_rust_versions() -> dict[str, str]:
    workspace = re.search(r'^rust-version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    versions = {}
    for manifest in ROOT.glob("*/Cargo.toml"):
        text = manifest.read_text()
        name = re.search(r'^name = "([^"]+)"', text, re.M)
        if name is None:
            continue
        own = re.search(r'^rust-version = "([^"]+)"', text, re.M)
        if own:
            versions[name.group(1)] = own.group(1)
        elif re.search(r"^rust-version\.workspace = true", text, re.M) and workspace:
            versions[name.group(1)] = workspace.group(1)
    return versions


README_FORBIDDEN = [
    ("an instruction count", re.compile(r"(?i)\binstructions?\b|callgrind")),
    ("a commit hash", re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")),
    ("an issue or pull request number", re.compile(r"(?i)(?:^|[\s(])#\d+\b|\bissues?/\d+|\bpull/\d+|\b(?:issue|PR) \d+")),
]


def check_facts() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Minimum supported Rust", 1)
    if len(section) != 2:
        problem("README.md", "no '## Minimum supported Rust' section")
    else:
        table = dict(re.findall(r"^\| `([a-z-]+)`[^|]*\| ([0-9.]+) \|$", section[1].split("\n## ")[0], re.M))
        for crate, version in sorted(cargo_rust_versions().items()):
            if crate in ("tollgate-bench", "tollgate-loom-tests"):
                continue
            if crate not in table:
                problem("README.md", f"the MSRV table has no row for {crate} (rust-version {version})")
            elif table[crate] != version:
                problem("README.md", f"the MSRV table says {crate} needs {table[crate]}, its Cargo.toml says {version}")
    # README's measured figures are docs/benchmarks.md's: each must still be on that page
    # (a new measurement there that changes one must change README in the same commit).
    why = readme.split("## Why tollgate", 1)[-1].split("\n## ", 1)[0]
    bench = (ROOT / "docs" / "benchmarks.md").read_text()
    for figure, unit in re.findall(r"(\d+(?:\.\d+)?(?:–\d+(?:\.\d+)?)?)( µs| B\b|×)", why):
        forms = [figure + unit] + ([figure + "x"] if unit == "×" else [])
        if not any(f in bench for f in forms):
            problem("README.md", f"'Why tollgate' quotes {figure + unit}, which docs/benchmarks.md no longer has")
    # README is for users: no instruction counts, commit hashes, issue numbers or history
    # (those are docs/benchmarks.md's, git's and the CHANGELOGs').
    for n, text in enumerate(readme.split("\n"), 1):
        for what, pattern in README_FORBIDDEN:
            if pattern.search(text):
                problem(f"README.md:{n}", f"has {what}: README is for users (keep it in docs/benchmarks.md or a CHANGELOG)")
    others = [*(p for p in pages() if p.name != "README.md"), ROOT / "ARCHITECTURE.md", ROOT / "CONTRIBUTING.md"]
    home_only = [
        # (what, pattern, the pages allowed to say it)
        ("a crate's Rust version (home: README's MSRV table)", re.compile(r"(?i)\b(?:needs|requires|msrv|minimum supported) rust\b[^.\n]{0,20}\b1\.\d+|\brust 1\.\d+"), set()),
        # Any Rust release number (1.60 to 1.99), not a ratio or a measurement.
        ("a Rust version (home: README's MSRV table)", re.compile(r"(?<![\d.,])1\.[6-9]\d(?:\.\d+)?(?![\d.]|\s*(?:×|x\b|%|µs|ms|ns|s\b|B\b|GiB|MiB))"), {"benchmarks.md"}),
        ("the header draft (home: docs/http.md)", re.compile(r"(?i)\bdraft[- ]?1\d\b"), {"http.md", "benchmarks.md"}),
        ("the lease bound (home: docs/redis.md)", re.compile(r"\bP`? (?:×|times\b)"), {"redis.md", "benchmarks.md"}),
    ]
    landing = sorted(ROOT.glob("*/src/lib.rs"))
    # The homes agree with the code: the header draft `HeaderStyle` derives as its default,
    # and the clock the limiters default their clock parameter to.
    style = (ROOT / "http" / "src" / "header_style.rs").read_text()
    default_draft = re.search(r"#\[default\]\s*Draft(\d+)", style)
    http_page = (ROOT / "docs" / "http.md").read_text()
    stated = re.findall(r"(?i)draft-(\d+) items[^.]*?by default", http_page)
    if default_draft is None or not stated:
        problem("docs/http.md", "cannot find the default header draft (HeaderStyle's #[default], or 'draft-N items ... by default' on the page)")
    elif set(stated) != {default_draft.group(1)}:
        problem("docs/http.md", f"says draft-{'/'.join(stated)} by default; HeaderStyle's default is Draft{default_draft.group(1)}")
    for source in sorted((ROOT / "http" / "src").rglob("*.rs")):
        for n, text in enumerate(source.read_text().split("\n"), 1):
            m = re.search(r"(?i)draft-?(\d+)\b[^.]{0,60}\bby default", text)
            if m and text.lstrip().startswith("//") and default_draft and m.group(1) != default_draft.group(1):
                problem(f"{source.relative_to(ROOT)}:{n}", f"says draft-{m.group(1)} by default; HeaderStyle's default is Draft{default_draft.group(1)}")
    limiter = (ROOT / "std" / "src" / "rate_limiter.rs").read_text()
    default_clock = re.search(r"pub struct RateLimiter<A, C = (\w+)>", limiter)
    clock_home = (ROOT / "std" / "src" / "clock" / "mod.rs").read_text()
    home_row = re.search(r"^//! \| \[`(\w+)`\] \|[^\n]*\| the default", clock_home, re.M)
    if default_clock is None or home_row is None:
        problem("std/src/clock/mod.rs", "cannot find the default clock (RateLimiter's `C = …`, or the table row saying 'the default')")
    elif default_clock.group(1) != home_row.group(1):
        problem("std/src/clock/mod.rs", f"calls {home_row.group(1)} the default; RateLimiter defaults to {default_clock.group(1)}")
    # README's own home: its "Minimum supported Rust" section states the versions.
    msrv_home = set()
    if len(section) == 2:
        first = readme[: len(readme) - len(section[1])].count("\n") + 1
        msrv_home = set(range(first, first + section[1].split("\n## ")[0].count("\n") + 1))
    for page in [ROOT / "README.md", *others, *landing]:
        rel = page.relative_to(ROOT)
        for n, text in enumerate(page.read_text().split("\n"), 1):
            if page.name == "lib.rs" and not text.lstrip().startswith("//!"):
                continue
            for what, pattern, allowed in home_only:
                if page.name == "README.md" and n in msrv_home and "Rust version" in what:
                    continue
                if pattern.search(text) and page.name not in allowed:
                    problem(f"{rel}:{n}", f"states {what}: link to it instead")
            m = re.search(r"(?i)default[^.\n]{0,30}`(TscClock|CoarseClock|ManualClock|FnClock)`|`(TscClock|CoarseClock|ManualClock|FnClock)`[^.\n]{0,12}by default", text)
            if m:
                problem(f"{rel}:{n}", "names a default clock other than MonotonicClock")


# Backticked words in ARCHITECTURE.md that are neither files nor Rust names.
NOT_NAMES = {
    "no_std", "unsafe", "per", "rescale", "undo", "decide", "refund", "used", "alloc",
}


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.split("\n") if f]


def check_architecture() -> None:
    files = tracked_files()
    sources = [ROOT / f for f in files if f.endswith(".rs")]
    lua = [ROOT / f for f in files if f.endswith(".lua")]
    rust = "\n".join(p.read_text(errors="replace") for p in sources)
    lua_text = "\n".join(p.read_text(errors="replace") for p in lua)
    types = set(re.findall(r"\b(?:struct|enum|trait|type|union)\s+([A-Z][A-Za-z0-9_]*)", rust))
    fns = set(re.findall(r"\bfn\s+([a-z_][a-z0-9_]*)", rust)) | set(re.findall(r"\bfunction\s+([a-z_][a-z0-9_]*)", lua_text))
    variants = set(re.findall(r"^\s+([A-Z][A-Za-z0-9]*)\s*[({,]", rust, re.M))
    stems = {pathlib.Path(f).stem for f in files if f.endswith(".rs")}
    text = (ROOT / "ARCHITECTURE.md").read_text()
    for n, line in enumerate(text.split("\n"), 1):
        # A table row that starts with a folder (`| `std/` | ...`) names paths inside it.
        cells = line.split("|")
        first = re.findall(r"`([a-z-]+/)`", cells[1]) if line.startswith("|") and len(cells) > 2 else []
        scope = first[0] if len(first) == 1 else ""
        for token in re.findall(r"`([^`]+)`", line):
            where = f"ARCHITECTURE.md:{n}"
            if re.search(r"\.(rs|lua|toml|md|sh|py)$", token) or token.endswith("/"):
                path = token.rstrip("/")
                if token in first:
                    in_scope = files
                else:
                    in_scope = [f[len(scope):] for f in files if f.startswith(scope)]
                if not any(f == path or f.endswith("/" + path) or f.startswith(path + "/") or ("/" + path + "/") in ("/" + f) for f in in_scope):
                    problem(where, f"names {token}, which is not in the tree" + (f" under {scope}" if scope else ""))
                continue
            name = token.rstrip("()")
            m = re.fullmatch(r"([A-Z][A-Za-z0-9_]*)::([a-z_][a-z0-9_]*|[A-Z][A-Za-z0-9_]*)", name)
            if m:
                ty, item = m.groups()
                if ty not in types:
                    problem(where, f"names the type {ty} (in `{token}`), defined nowhere")
                elif item[0].islower() and item not in fns:
                    problem(where, f"names the function {item} (in `{token}`), defined nowhere")
                elif item[0].isupper() and item not in variants and item not in types:
                    problem(where, f"names {item} (in `{token}`), defined nowhere")
                continue
            if re.fullmatch(r"[A-Z][a-z][A-Za-z0-9]*", name):
                if name not in types:
                    problem(where, f"names the type {name}, defined nowhere")
                continue
            if re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", name) and name not in NOT_NAMES:
                if name not in fns and name not in stems:
                    problem(where, f"names the function {name}, defined nowhere")


def slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    found: set[str] = set()
    seen: dict[str, int] = {}
    for m in re.finditer(r"^#{1,6} (.+)$", text, re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        found.add(s if n == 0 else f"{s}-{n}")
    return found


def check_links() -> None:
    repository = re.search(r'^repository = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1).rstrip("/")
    linking = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "CONTRIBUTING.md",
               *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("*/CHANGELOG.md"))]
    for page in linking:
        rel = page.relative_to(ROOT)
        text = page.read_text()
        for m in re.finditer(r"\]\(([^)\s]+)\)|^\[[^\]]+\]: (\S+)", text, re.M):
            link = m.group(1) or m.group(2)
            where = f"{rel}:{text[: m.start()].count(chr(10)) + 1}"
            ours = re.match(re.escape(repository) + r"/(?:blob|tree)/main/(.*)", link)
            if ours:
                path, _, fragment = ours.group(1).partition("#")
                target = (ROOT / path).resolve()
            elif re.match(r"[a-z][a-z0-9+.-]*:", link):
                continue
            else:
                if page.name == "README.md" and not link.startswith("#"):
                    problem(where, f"links to {link} relatively: README is every crate's crates.io page, "
                            f"where a relative link resolves against the crate's folder; write {repository}/blob/main/{link}")
                    continue
                path, _, fragment = link.partition("#")
                target = (page.parent / path).resolve() if path else page.resolve()
            if not target.exists():
                problem(where, f"links to {link}, which does not exist")
            elif fragment and target.suffix == ".md" and fragment not in anchors(target):
                problem(where, f"links to {link}, whose page has no such heading")


def check_rules_reference() -> None:
    source = (ROOT / "std" / "src" / "policy" / "config.rs").read_text()
    page = (ROOT / "docs" / "rules.md").read_text()
    section = page.split("## The rules file, field by field", 1)
    if len(section) != 2:
        problem("docs/rules.md", "no '## The rules file, field by field' section")
        return
    documented = set()
    for line in section[1].split("\n## ", 1)[0].split("\n"):
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2:
            documented |= set(re.findall(r"`([a-z_]+)`", cells[1]))
    structs = re.finditer(
        r"#\[serde\(deny_unknown_fields\)\]\s*(?:#\[[^\]]*\]\s*)*pub(?:\(crate\))? struct (\w+)[^{]*\{(.*?)\n\}",
        source, re.S)
    found = False
    for m in structs:
        found = True
        for field in re.findall(r"^\s*pub(?:\(crate\))? (\w+):", m.group(2), re.M):
            if field not in documented:
                problem("docs/rules.md", f"the rules file's {m.group(1)}.{field} has no row in 'The rules file, field by field'")
    if not found:
        problem("std/src/policy/config.rs", "no struct with deny_unknown_fields: check-docs cannot see the rules file's fields")


def main() -> int:
    check_blocks()
    check_facts()
    check_architecture()
    check_rules_reference()
    check_links()
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check-docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check-docs: README and docs/ blocks are their files, one home per fact, ARCHITECTURE.md names what exists, links resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
