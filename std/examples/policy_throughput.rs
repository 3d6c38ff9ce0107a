//! Rough single-thread and two-thread cost of `Policy::allow` (two rules, three tiers,
//! 10 000 clients, all admitted; and a denied-flood case). Indicative figures, printed as
//! ns per check of the thread's own CPU time (Linux `/proc/thread-self/schedstat`, so
//! other processes on a busy machine do not inflate them; wall time elsewhere); the
//! benchmarks crate carries the official numbers.
//!
//! Run: `cargo run -p tollgate --release --example policy_throughput`

use std::time::Instant;

use tollgate::policy::Policy;
use tollgate::{ManualClock, Nanos};

const RULES: &str = r#"
[[rules]]
name = "default"
[[rules.tiers]]
name = "burst"
limit = 1000000
window = "1s"
[[rules.tiers]]
name = "daily"
limit = 1000000000
window = "1d"
algorithm = "fixed_window"

[[rules]]
name = "search"
endpoint = "/search"
limit = 10000
window = "1s"
algorithm = "sliding_window_counter"
"#;

const CLIENTS: usize = 10_000;
const CHECKS: usize = 2_000_000;

/// This thread's CPU time in ns, if the OS tells.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

fn run(
    policy: &Policy<ManualClock>,
    clients: &[String],
    offset: usize,
    epoch: u64,
) -> (usize, f64) {
    let start = Instant::now();
    let cpu_start = thread_cpu_ns();
    let mut admitted = 0;
    for i in 0..CHECKS {
        let client = &clients[(i.wrapping_mul(7919) + offset) % clients.len()];
        let now = Nanos::from_secs(epoch) + Nanos::new((i as u64) * 1000);
        if policy
            .allow_at(client, "/search", 1, now)
            .is_ok_and(|d| d.allowed())
        {
            admitted += 1;
        }
    }
    let spent = match (cpu_start, thread_cpu_ns()) {
        (Some(a), Some(b)) => b.saturating_sub(a) as f64,
        _ => start.elapsed().as_nanos() as f64,
    };
    (admitted, spent / CHECKS as f64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clients: Vec<String> = (0..CLIENTS).map(|i| format!("client-{i:05}")).collect();

    let policy = Policy::from_toml(RULES, ManualClock::new())?;
    run(&policy, &clients, 0, 10); // warm: insert every key
    let (admitted, ns) = run(&policy, &clients, 0, 20);
    println!(
        "1 thread, 3 tiers, {CLIENTS} clients, admitted {admitted}/{CHECKS}: {ns:.1} ns/check"
    );

    let both: Vec<(usize, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let (policy, clients) = (&policy, &clients);
                s.spawn(move || run(policy, clients, t * 5_000, 30))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, (admitted, ns)) in both.iter().enumerate() {
        println!("2 threads, thread {t}: admitted {admitted}/{CHECKS}: {ns:.1} ns/check");
    }

    let tight = Policy::from_toml(
        "[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"1d\"\n[[rules]]\nname = \"e\"\nendpoint = \"/search\"\nlimit = 1\nwindow = \"1d\"\n",
        ManualClock::new(),
    )?;
    run(&tight, &clients, 0, 10);
    let (admitted, ns) = run(&tight, &clients, 0, 20);
    println!("denied flood (precheck: loads only), admitted {admitted}/{CHECKS}: {ns:.1} ns/check");
    Ok(())
}
