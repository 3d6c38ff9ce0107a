//! The real `tollgate-server` binary's command line: `--help` prints the usage on stdout
//! and succeeds (a packaging smoke test, `tollgate-server --help | less`); a mistake is
//! named on stderr with the usage, exit status 2, a Redis setting without Redis too.

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

/// A Redis setting without Redis is a mistake, not a silent run in process: the state
/// an operator meant to share (`--redis-prefix`) would be this process's alone.
#[test]
fn a_redis_prefix_without_redis_is_refused() {
    let dir = std::env::temp_dir().join(format!("tollgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("rules.yaml");
    std::fs::write(&rules, "domain: d\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-server"))
        .args(["--config", rules.to_str().unwrap()])
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--redis-prefix", "shop"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("started in process, --redis-prefix ignored");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("--redis-prefix needs --redis"),
        "{stderr}"
    );
}
