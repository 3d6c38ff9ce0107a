//! loom models of `tollgate`'s policy layer (`tollgate::policy::Policy`): the all-or-nothing
//! tiers of one rule under two racing callers, the hot-reload swap racing a check, and a
//! deliberately broken twin (two tiers composed without compensation).
//!
//! These models are only meaningful when the policy's per-key cells (`tier_cell.rs`) and
//! shard locks (`keyed_cells.rs`) are `tollgate`'s `sync.rs` types, which `--cfg
//! tollgate_loom` swaps for loom's; with `std` primitives loom sees no interleaving inside a
//! check and every model passes vacuously.
//!
//! Oracle: after every explored execution, the admitted count and every tier's `remaining`
//! equal a sequential replay of only the admitted requests on a fresh policy.
#![cfg(tollgate_loom)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc as StdArc;
use std::time::Instant;

use loom::sync::Arc;
use tollgate::policy::{FnClock, Policy, PolicyConfig};
use tollgate::Nanos;
use tollgate_loom_tests::DEFAULT_PREEMPTION_BOUND;

/// The clock every model reads: one instant, as racing callers share a clock reading.
fn now() -> Nanos {
    Nanos::from_secs(1_000)
}

type TestPolicy = Policy<FnClock<fn() -> Nanos>>;

/// One rule, two fixed-window tiers of limits `a` and `b` (one hour, so nothing refills).
/// (`capacity = 16` here and below: tier tables are allocated up front, and loom tracks
/// every atomic of them in every execution.)
fn two_tiers(a: u64, b: u64) -> String {
    format!(
        r#"
        capacity = 16
        [[rules]]
        name = "client"
        [[rules.tiers]]
        name = "a"
        limit = {a}
        window = "1h"
        algorithm = "fixed_window"
        [[rules.tiers]]
        name = "b"
        limit = {b}
        window = "1h"
        algorithm = "fixed_window"
        "#
    )
}

/// One rule, one fixed-window tier `a` of `limit`.
fn one_tier(name: &str, limit: u64) -> String {
    format!(
        r#"
        capacity = 16
        [[rules]]
        name = "{name}"
        [[rules.tiers]]
        name = "a"
        limit = {limit}
        window = "1h"
        algorithm = "fixed_window"
        "#
    )
}

fn policy(toml: &str, precheck: bool) -> TestPolicy {
    Policy::from_toml(toml, FnClock(now as fn() -> Nanos))
        .unwrap()
        .with_precheck(precheck)
}

/// Every tier's `remaining` for one more permit of client `c`.
fn remaining(policy: &TestPolicy) -> Vec<u64> {
    let d = policy.peek("c", "/e", 1).unwrap();
    d.tiers().iter().map(|t| t.decision.remaining).collect()
}

/// Runs `body` under loom (preemption bound `LOOM_MAX_PREEMPTIONS`, default 3) and prints
/// the execution count and wall time.
fn model(name: &str, body: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(DEFAULT_PREEMPTION_BOUND);
    }
    let executions = StdArc::new(AtomicUsize::new(0));
    let counter = StdArc::clone(&executions);
    let started = Instant::now();
    builder.check(move || {
        // Relaxed: a statistic read after the model finished.
        counter.fetch_add(1, Ordering::Relaxed);
        body();
    });
    eprintln!(
        "loom model {name}: {} executions in {:.2?}",
        // Relaxed: the model has finished.
        executions.load(Ordering::Relaxed),
        started.elapsed()
    );
}

/// Two callers each ask one permit of a rule whose tiers allow 3 (a) and 1 (b). Exactly one
/// is admitted; when both passed the precheck (or without it), the loser's take of `a` must
/// be compensated: `a` ends with 1 used, `b` with 1, as after one sequential admit.
/// (`remaining` is what a peek of one more permit reports, so `a` must not be exhausted.)
fn all_or_nothing(name: &str, precheck: bool) {
    let compensated = StdArc::new(AtomicUsize::new(0));
    let seen = StdArc::clone(&compensated);
    model(name, move || {
        let shared = Arc::new(policy(&two_tiers(3, 1), precheck));
        let other = {
            let shared = Arc::clone(&shared);
            loom::thread::spawn(move || shared.allow("c", "/e", 1).unwrap().allowed())
        };
        let mine = shared.allow("c", "/e", 1).unwrap().allowed();
        let theirs = other.join().unwrap();
        let admitted = usize::from(mine) + usize::from(theirs);
        assert_eq!(admitted, 1, "tier b admits exactly one request");
        let replay = policy(&two_tiers(3, 1), precheck);
        for _ in 0..admitted {
            assert!(replay.allow("c", "/e", 1).unwrap().allowed());
        }
        assert_eq!(
            remaining(&shared),
            remaining(&replay),
            "a tier kept a permit of a denied request"
        );
        // Relaxed: a statistic read after the model finished.
        seen.fetch_add(
            usize::try_from(shared.compensations()).unwrap(),
            Ordering::Relaxed,
        );
    });
    // Relaxed: the model has finished.
    assert!(
        compensated.load(Ordering::Relaxed) > 0,
        "no explored execution reached the compensation path"
    );
}

#[test]
fn policy_tiers_all_or_nothing_with_precheck() {
    all_or_nothing("policy_tiers_all_or_nothing_with_precheck", true);
}

#[test]
fn policy_tiers_all_or_nothing_without_precheck() {
    all_or_nothing("policy_tiers_all_or_nothing_without_precheck", false);
}

/// The broken twin: tiers `a` and `b` as two separate policies called one after the other,
/// with no compensation of `a` when `b` denies. The same oracle must catch it.
#[test]
#[should_panic(expected = "kept a permit")]
fn broken_policy_tiers_without_compensation() {
    model("broken_policy_tiers_without_compensation", || {
        let a = Arc::new(policy(&one_tier("a", 3), false));
        let b = Arc::new(policy(&one_tier("b", 1), false));
        let both = |a: &TestPolicy, b: &TestPolicy| {
            a.allow("c", "/e", 1).unwrap().allowed() && b.allow("c", "/e", 1).unwrap().allowed()
        };
        let other = {
            let (a, b) = (Arc::clone(&a), Arc::clone(&b));
            loom::thread::spawn(move || both(&a, &b))
        };
        let mine = both(&a, &b);
        let theirs = other.join().unwrap();
        let admitted = usize::from(mine) + usize::from(theirs);
        assert_eq!(admitted, 1);
        let replay = policy(&two_tiers(3, 1), false);
        for _ in 0..admitted {
            assert!(replay.allow("c", "/e", 1).unwrap().allowed());
        }
        let mut got = remaining(&a);
        got.extend(remaining(&b));
        assert_eq!(
            got,
            remaining(&replay),
            "a tier kept a permit of a denied request"
        );
    });
}

/// A check racing a reload that raises tier `a` from 2 to 4 (same rule and tier names, so
/// the key keeps its state). One permit was used before; the racing check is admitted in
/// either order and the key ends with 2 used of 4: the reload neither loses the check's
/// take (converting a stale copy) nor lets a check on the old set write to a dropped store.
#[test]
fn policy_reload_races_a_check() {
    model("policy_reload_races_a_check", || {
        let shared = Arc::new(policy(&one_tier("client", 2), true));
        assert!(shared.allow("c", "/e", 1).unwrap().allowed());
        let reload = {
            let shared = Arc::clone(&shared);
            loom::thread::spawn(move || {
                let config = PolicyConfig::from_toml(&one_tier("client", 4)).unwrap();
                shared.reload(config).unwrap();
            })
        };
        let admitted = shared.allow("c", "/e", 1).unwrap().allowed();
        reload.join().unwrap();
        assert!(
            admitted,
            "one of two permits was free before and after the reload"
        );
        let replay = policy(&one_tier("client", 4), true);
        for _ in 0..2 {
            assert!(replay.allow("c", "/e", 1).unwrap().allowed());
        }
        assert_eq!(
            remaining(&shared),
            remaining(&replay),
            "the key kept its state across the swap"
        );
    });
}
