//! The example docs/embedded.md shows (`examples/static_limiter.rs`), run as a user runs it:
//! started as its own process, it must exit successfully (its assertions are what the page
//! promises). `scripts/check-docs.py` checks that the page's block is this file byte for
//! byte.
//! Not under miri (`scripts/stages/miri.sh` runs this crate's tests), which starts no
//! processes.
#![cfg(not(miri))]

use std::path::PathBuf;
use std::process::Command;

/// Runs the example `name` (built by `cargo test` next to this test's binary).
fn run(name: &str) {
    let mut path: PathBuf = std::env::current_exe().expect("the test binary's path");
    path.pop(); // the test binary
    path.pop(); // deps/
    path.push("examples");
    path.push(name);
    let output = Command::new(&path).output().unwrap_or_else(|e| {
        panic!(
            "{}: {e} (a whole `cargo test` builds the examples; with a test filter, \
             `cargo build -p tollgate-core --examples` first)",
            path.display()
        )
    });
    assert!(
        output.status.success(),
        "{name} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn static_limiter_example() {
    run("static_limiter");
}
