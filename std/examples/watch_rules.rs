//! A rules file followed as it changes (feature `watch`): a deploy renames a new file over
//! it and the policy takes it; a broken file keeps the rules; a SIGHUP handler's
//! `reload_now`. `cargo run -p tollgate --features watch --example watch_rules`
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::policy::{Policy, RulesFile};
use tollgate::MonotonicClock;

fn rules(limit: u64) -> String {
    format!("[[rules]]\nname = \"default\"\nlimit = {limit}\nwindow = \"1m\"\n")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("tollgate-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("rules.toml");
    std::fs::write(&path, rules(100))?;

    // The server loads the file, then follows it; keep `watch` alive while serving.
    let policy = Arc::new(Policy::from_toml(
        &std::fs::read_to_string(&path)?,
        MonotonicClock::new(),
    )?);
    let watch = RulesFile::watch(Arc::clone(&policy), &path)?;

    // A deploy writes the new file beside the old one and renames it into place.
    std::fs::write(dir.join("rules.toml.tmp"), rules(200))?;
    std::fs::rename(dir.join("rules.toml.tmp"), &path)?;
    let start = Instant::now();
    while policy.peek("acct_7", "/search", 0)?.limit() != 200 {
        assert!(start.elapsed() < Duration::from_secs(30), "not reloaded");
        std::thread::sleep(Duration::from_millis(10));
    }

    // A broken file: refused, the rules in force kept (`reload_now` is what a SIGHUP
    // handler calls; the watch would refuse it the same way).
    std::fs::write(
        &path,
        "[[rules]]\nname = \"default\"\nlimit = 0\nwindow = \"1m\"\n",
    )?;
    let error = watch.reload_now().unwrap_err();
    assert_eq!(error.to_string(), "rules[0].limit: must be > 0");
    assert_eq!(policy.peek("acct_7", "/search", 0)?.limit(), 200);
    let status = watch.status();
    assert!(status.applied >= 1 && status.refused >= 1);

    drop(watch); // stops the watch: its thread ends
    std::fs::remove_dir_all(&dir)?;
    println!("watch_rules: every assertion held");
    Ok(())
}
