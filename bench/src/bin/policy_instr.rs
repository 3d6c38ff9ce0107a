//! `policy_instr`: the `policy_3tiers_10k` check (and its governor column) in a plain loop,
//! for counting instructions per check under callgrind, free of timing noise.
//!
//! ```text
//! cargo build --release -p tollgate-bench --bin policy_instr
//! valgrind --tool=callgrind --toggle-collect='*tollgate_check*' \
//!     target/release/policy_instr tollgate 100000
//! ```
//!
//! Arguments: the contender (`tollgate` or `governor`, or `tollgate-deny` / `governor-deny`
//! for the `policy_3tiers_10k_deny` case) and how many timed checks (after two
//! untimed rounds over every client, so every key is resident). Divide the instructions
//! callgrind collects by the number of checks (`--toggle-collect` counts only inside the
//! check function).

use std::hint::black_box;
use std::process::ExitCode;

use tollgate::policy::Policy;
use tollgate::TscClock;
use tollgate_bench::direct_cases::governor_quota;
use tollgate_bench::policy_cases::{POLICY_CLIENTS, POLICY_DENY_RULES, POLICY_RULES};

type GovernorKeyed = governor::RateLimiter<
    String,
    governor::state::keyed::DashMapStateStore<String, foldhash::fast::RandomState>,
    governor::clock::QuantaClock,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
>;

fn governor_keyed(per_ns: u64, burst: u32) -> GovernorKeyed {
    governor::RateLimiter::dashmap_with_clock_and_hasher(
        governor_quota(per_ns, burst),
        governor::clock::QuantaClock::default(),
        foldhash::fast::RandomState::default(),
    )
}

/// One policy check (inline: the warm-up rounds run it inside `main`, which callgrind does
/// not count).
#[inline(always)]
fn tollgate(policy: &Policy<TscClock>, client: &str) -> bool {
    policy
        .allow(black_box(client), "/search", 1)
        .is_ok_and(|d| d.allowed())
}

/// One timed policy check, out of line so callgrind can count it alone.
#[inline(never)]
fn tollgate_check(policy: &Policy<TscClock>, client: &str) -> bool {
    tollgate(policy, client)
}

/// The governor column: three keyed limiters in a row, every one asked even after a
/// refusal, as in `policy_3tiers_10k_deny`'s column (a policy decision reports every tier;
/// `all` would stop at the first refusal and count one lookup per denied check).
#[inline(always)]
fn governor(limiters: &[GovernorKeyed; 3], client: &String) -> bool {
    let [burst, day, search] = limiters;
    let burst = burst.check_key(black_box(client)).is_ok();
    let day = day.check_key(black_box(client)).is_ok();
    let search = search.check_key(black_box(client)).is_ok();
    burst && day && search
}

/// One timed governor check, out of line.
#[inline(never)]
fn governor_check(limiters: &[GovernorKeyed; 3], client: &String) -> bool {
    governor(limiters, client)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let contender = args.next().unwrap_or_else(|| "tollgate".into());
    let checks: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let clients: Vec<String> = (0..POLICY_CLIENTS)
        .map(|i| format!("client-{i:05}"))
        .collect();
    let warm = 2 * clients.len();
    let mut admitted = 0usize;
    // The deny forms (`policy_3tiers_10k_deny`): every tier admits one request per client,
    // during the warm-up, then denies every check.
    let deny = contender.ends_with("-deny");
    let (rules, limits) = if deny {
        let hour = 3_600_000_000_000;
        (POLICY_DENY_RULES, [(hour, 1), (24 * hour, 1), (hour, 1)])
    } else {
        (
            POLICY_RULES,
            [
                (1_000, 1_000_000),
                (86_400, 1_000_000_000),
                (600_000, 100_000),
            ],
        )
    };
    match contender.trim_end_matches("-deny") {
        "tollgate" => {
            let policy = match Policy::from_toml(rules, TscClock::new()) {
                Ok(policy) => policy,
                Err(e) => panic!("the benchmark's rules are valid: {e}"),
            };
            for i in 0..warm {
                admitted += usize::from(tollgate(&policy, &clients[i % clients.len()]));
            }
            for i in warm..warm + checks {
                admitted += usize::from(tollgate_check(&policy, &clients[i % clients.len()]));
            }
        }
        "governor" => {
            let limiters = limits.map(|(per_ns, burst)| governor_keyed(per_ns, burst));
            for i in 0..warm {
                admitted += usize::from(governor(&limiters, &clients[i % clients.len()]));
            }
            for i in warm..warm + checks {
                admitted += usize::from(governor_check(&limiters, &clients[i % clients.len()]));
            }
        }
        other => {
            eprintln!("usage: policy_instr [tollgate|governor][-deny] [CHECKS] (not {other:?})");
            return ExitCode::from(2);
        }
    }
    if deny {
        // Only each client's first request is admitted.
        assert_eq!(admitted, clients.len(), "every later check is denied");
        println!("{contender}: {checks} timed checks after {warm} warm-up checks");
        return ExitCode::SUCCESS;
    }
    assert_eq!(admitted, warm + checks, "every check is admitted");
    println!("{contender}: {checks} timed checks after {warm} warm-up checks");
    ExitCode::SUCCESS
}
