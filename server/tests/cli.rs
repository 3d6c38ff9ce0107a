//! The real `tollgate-server` binary's command line: `--help` prints the usage on stdout
//! and succeeds (a packaging smoke test, `tollgate-server --help | less`); a mistake is
//! named on stderr with the usage, exit status 2.

use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate-server"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_is_printed_on_stdout_and_succeeds() {
    for flag in ["--help", "-h"] {
        let out = run(&[flag]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{flag}: {:?}", out.status);
        assert!(
            stdout.starts_with("usage: tollgate-server"),
            "{flag}: {stdout}"
        );
        assert!(out.stderr.is_empty(), "{flag}");
    }
    let wrong = run(&["--bogus"]);
    assert_eq!(wrong.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.starts_with("invalid option '--bogus'"), "{stderr}");
    assert!(stderr.contains("usage: tollgate-server"), "{stderr}");
}
