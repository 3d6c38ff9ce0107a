//! The examples README and docs/rules.md show (`examples/rules_file.rs`, `rules_tour.rs`,
//! `limiters.rs`), run as a user runs them: each is started as its own process and must
//! exit successfully (their assertions are what the pages promise). `scripts/check-docs.py`
//! checks that the pages' blocks are these files byte for byte.

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
             `cargo build -p tollgate --examples` first)",
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
fn rules_file_example() {
    run("rules_file");
}

#[test]
fn rules_tour_example() {
    run("rules_tour");
}

#[test]
fn limiters_example() {
    run("limiters");
}
