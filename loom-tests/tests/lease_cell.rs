//! loom models of `tollgate::lease::LeaseCell`, the lock-free cell a process spends a hot
//! key's leased permits from (`std/src/lease.rs`: a word of generation and permits, an
//! owner; spenders on any thread, one keeper). Each model has a broken twin that switches a
//! protocol step off (`tollgate::lease::LeaseFault`, loom builds only) and must fail:
//!
//! 1. **A spend racing a refill and an expiry.** The cell is held for K with one permit;
//!    the keeper grants one more (a refill), then revokes what is left (the lease
//!    expired), while two spenders each take a permit, one giving it back (a request that
//!    did not go through after all). After every execution the permits kept (taken and not
//!    given back), the permits the revoke returned and the permits left add up to the
//!    permits granted, and nothing is left in the cell: a spend that lost to the revoke
//!    took nothing, a give-back after it added nothing. Broken twin (`SpendLoadStore`: a
//!    spend as a load and a plain store): loom finds two spends of one permit, or a spend
//!    writing back the permits the revoke returned.
//! 2. **A cell handed to another key.** The cell is held for A with one permit; the keeper
//!    releases it (revoke, owner freed), claims it for B and grants B two permits, while a
//!    spender for A takes a permit and gives it back (and, in a three-thread variant, a
//!    spender for B takes one). A's spender never takes any of B's permits: whatever it
//!    takes comes from A's lease generation, B's grant is exactly what B's spender took
//!    plus what is left, and A's permits are exactly what A kept plus what the release
//!    returned. Broken twin (`NoOwnerRecheck`: the owner checked on
//!    a spend's first pass only): A's spend reads A's word and owner, loses its
//!    compare-and-swap to the hand-off, and retries onto B's grant.
//!
//! 3. **A spend racing a refill under the cap and a review.** The cell is held for K with
//!    two permits under a cap of three; the keeper fills one more (`fill`, as a refill whose
//!    size was chosen before a give-back), then trims to one (`trim`, a review returning
//!    what the key no longer needs), while a spender takes a permit and gives it back under
//!    the cap and another takes one. The cell never holds more than the cap, and kept +
//!    trimmed + left = granted. Broken twin (`SpendLoadStore`): a lost update.
//!
//! Every model prints its execution count and wall time; bounded by
//! `LOOM_MAX_PREEMPTIONS` (default 3), as the whole stage.
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use tollgate::lease::{LeaseCell, LeaseFault, Spend, MAX_PERMITS};
use tollgate_loom_tests::explore;

/// Runs `body` under loom (preemption bound `LOOM_MAX_PREEMPTIONS`, default 3) and prints
/// the execution count and wall time.
fn model(name: &str, body: impl Fn() + Sync + Send + 'static) {
    explore(name, None, body);
}

/// A cell with `fault` switched on (if any), claimed for `key`, holding `permits`.
fn held_cell(fault: Option<LeaseFault>, key: u64, permits: u64) -> Arc<LeaseCell> {
    let mut cell = LeaseCell::new();
    if let Some(fault) = fault {
        cell.loom_inject(fault);
    }
    assert!(cell.claim(key));
    assert_eq!(cell.grant(permits), Ok(permits));
    Arc::new(cell)
}

/// What one spender did.
#[derive(Clone, Debug, Default)]
struct Spent {
    /// Permits its spends took.
    taken: u64,
    /// Permits it gave back that the cell took (`give_back` returned `true`).
    returned: u64,
    /// Every answer, for the failure messages.
    answers: Vec<Spend>,
}

impl Spent {
    /// Permits taken and kept.
    fn kept(&self) -> u64 {
        self.taken - self.returned
    }
}

/// Spends one permit for `key`, `spends` times; with `give_back`, gives the first permit
/// taken back (a request that did not go through after all).
fn spender(cell: &LeaseCell, key: u64, spends: usize, give_back: bool) -> Spent {
    let mut spent = Spent::default();
    let mut to_give_back = give_back;
    for _ in 0..spends {
        let answer = cell.spend(key, 1);
        spent.answers.push(answer);
        match answer {
            Spend::Taken { generation, .. } => {
                spent.taken += 1;
                if to_give_back {
                    to_give_back = false;
                    if cell.give_back(generation, 1, MAX_PERMITS) {
                        spent.returned += 1;
                    }
                }
            }
            Spend::Short { left } => assert_eq!(left, 0, "short of one permit with {left}"),
            Spend::NotHeld => {}
        }
    }
    spent
}

/// Model 1: the cell held for K with one permit; the keeper (the model's main thread)
/// grants one more, then revokes, while a spender takes a permit and gives it back and
/// another takes one.
fn refill_and_expiry(fault: Option<LeaseFault>) {
    const K: u64 = 7;
    let cell = held_cell(fault, K, 1);
    let spenders: Vec<_> = [true, false]
        .into_iter()
        .map(|give_back| {
            let cell = Arc::clone(&cell);
            loom::thread::spawn(move || spender(&cell, K, 1, give_back))
        })
        .collect();
    let total = cell.grant(1).expect("two permits fit");
    let revoked = cell.revoke();
    let spent: Vec<Spent> = spenders
        .into_iter()
        .map(|s| s.join().expect("spender panicked"))
        .collect();
    let left = cell.permits();
    let granted = 2;
    let kept: u64 = spent.iter().map(Spent::kept).sum();
    let trace =
        format!("refill to {total}, revoke returned {revoked}, {left} left, spenders: {spent:?}");
    assert!(
        spent
            .iter()
            .flat_map(|s| &s.answers)
            .all(|a| *a != Spend::NotHeld),
        "lease accounting broken: a spend for the holding key was refused: {trace}"
    );
    assert!(
        kept <= granted,
        "lease accounting broken: {kept} permits kept of {granted} granted: {trace}"
    );
    assert_eq!(
        kept + revoked + left,
        granted,
        "lease accounting broken: kept + revoked + left is not what was granted: {trace}"
    );
    assert_eq!(
        left, 0,
        "lease accounting broken: permits in the cell after its revoke: {trace}"
    );
}

#[test]
fn lease_spend_races_refill_and_expiry() {
    model("lease/spend vs refill and expiry", || {
        refill_and_expiry(None)
    });
}

/// With spends as a load and a plain store, loom finds a lost update.
#[test]
#[should_panic(expected = "lease accounting broken")]
fn broken_spend_without_cas_is_caught() {
    model("broken: lease spend as load + store", || {
        refill_and_expiry(Some(LeaseFault::SpendLoadStore))
    });
}

/// Model 3: the cell held for K with two permits under a cap of 3; the keeper fills one
/// more (a refill chosen before the spenders' give-back), then trims to 1 (a review), while
/// a spender takes a permit and gives it back under the cap and another takes one.
fn fill_and_review(fault: Option<LeaseFault>) {
    const K: u64 = 9;
    const CAP: u64 = 3;
    let cell = held_cell(fault, K, 2);
    let spenders: Vec<_> = [true, false]
        .into_iter()
        .map(|give_back| {
            let cell = Arc::clone(&cell);
            loom::thread::spawn(move || {
                let mut spent = Spent::default();
                if let Spend::Taken { generation, .. } = cell.spend(K, 1) {
                    spent.taken += 1;
                    if give_back && cell.give_back(generation, 1, CAP) {
                        spent.returned += 1;
                    }
                }
                spent
            })
        })
        .collect();
    let filled = cell.fill(1, CAP);
    let peak = cell.permits();
    let trimmed = cell.trim(1);
    let spent: Vec<Spent> = spenders
        .into_iter()
        .map(|s| s.join().expect("spender panicked"))
        .collect();
    let left = cell.permits();
    let granted = 2 + filled;
    let kept: u64 = spent.iter().map(Spent::kept).sum();
    let trace = format!(
        "filled {filled} (then {peak}), trimmed {trimmed}, {left} left, spenders: {spent:?}"
    );
    assert!(
        peak <= CAP && left <= CAP,
        "lease accounting broken: above the cap: {trace}"
    );
    assert_eq!(
        kept + trimmed + left,
        granted,
        "lease accounting broken: kept + trimmed + left is not what was granted: {trace}"
    );
}

#[test]
fn lease_spend_races_fill_and_review() {
    model("lease/spend and give-back vs fill and review", || {
        fill_and_review(None)
    });
}

/// With spends as a load and a plain store, loom finds a lost update against the fill or
/// the trim.
#[test]
#[should_panic(expected = "lease accounting broken")]
fn broken_spend_without_cas_is_caught_by_the_review() {
    model(
        "broken: lease spend as load + store vs fill and review",
        || fill_and_review(Some(LeaseFault::SpendLoadStore)),
    );
}

/// Model 2: the cell held for A with one permit (of two: the setup spends one to learn
/// A's lease generation); the keeper (the model's main thread)
/// releases it, claims it for B and grants B two permits, while a spender for A takes a
/// permit and gives it back, and (with `b_spender`) a spender for B takes one.
fn hand_off(fault: Option<LeaseFault>, b_spender: bool) {
    const A: u64 = 7;
    const B: u64 = 9;
    let cell = held_cell(fault, A, 2);
    // A's lease generation, as a spend reports it (one permit left).
    let Spend::Taken {
        left: 1,
        generation: a_generation,
    } = cell.spend(A, 1)
    else {
        panic!("held for A with two permits");
    };
    let a_spender = {
        let cell = Arc::clone(&cell);
        loom::thread::spawn(move || spender(&cell, A, 1, true))
    };
    let b_spender = b_spender.then(|| {
        let cell = Arc::clone(&cell);
        loom::thread::spawn(move || spender(&cell, B, 1, false))
    });
    let released = cell.release();
    assert!(cell.claim(B), "a released cell is free");
    assert_eq!(cell.grant(2), Ok(2), "a released cell is empty");
    let a = a_spender.join().expect("A's spender panicked");
    let b = b_spender.map_or_else(Spent::default, |s| s.join().expect("B's spender panicked"));
    let left = cell.permits();
    let trace = format!("release returned {released}, {left} left, A: {a:?}, B: {b:?}");
    assert_eq!(cell.owner(), Some(B));
    // Checked first: A's spender may give a stolen permit back before anyone sees it gone.
    assert!(
        a.answers.iter().all(|answer| match answer {
            Spend::Taken { generation, .. } => *generation == a_generation,
            _ => true,
        }),
        "A's spender took permits granted for B (A's generation is {a_generation}): {trace}"
    );
    assert_eq!(
        b.taken + left,
        2,
        "B's grant is not what B's spender took plus what is left (A's spender took from \
         or gave back into B's lease): {trace}"
    );
    assert_eq!(
        a.kept() + released,
        1,
        "lease accounting broken: A's kept + released is not A's grant: {trace}"
    );
}

#[test]
fn lease_spend_races_hand_off() {
    model("lease/spend for A vs hand-off to B", || {
        hand_off(None, false)
    });
}

#[test]
fn lease_spends_race_hand_off() {
    model("lease/spends for A and B vs hand-off to B", || {
        hand_off(None, true)
    });
}

/// With the owner checked on a spend's first pass only, loom finds A's retry taking B's
/// permit.
#[test]
#[should_panic(expected = "took permits granted for B")]
fn broken_spend_without_owner_recheck_is_caught() {
    model(
        "broken: lease spend for A vs hand-off, no owner re-check",
        || hand_off(Some(LeaseFault::NoOwnerRecheck), false),
    );
}
