//! Several requests decided as one (`Policy::check_all`): every tier of every request
//! admits or none keeps a permit — on pinned traces, on random traces against the plain
//! reference store and against a model that checks the requests one by one and refunds
//! the admitted ones when any is denied, and under real threads sharing a quota.

mod policy_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use policy_support::{MapStore, Rng, RULES};
use tollgate::policy::{BatchError, FnClock, Policy, Request, MAX_TIERS};
use tollgate::{InsufficientCapacity, ManualClock, Nanos};

const USER_AND_ORG: &str = r#"
    [[rules]]
    name = "user"
    endpoint = "user"
    limit = 5
    window = "1m"
    algorithm = "fixed_window"

    [[rules]]
    name = "org"
    endpoint = "org"
    tiers = [
        { name = "org-second", limit = 3, window = "1s", algorithm = "token_bucket" },
        { name = "org-hour", limit = 4, window = "1h", algorithm = "fixed_window" },
    ]
"#;

/// The organisation's two tiers as a denied-or-admitted trace shows them.
fn org(second: (bool, u64), hour: (bool, u64)) -> Vec<(String, bool, u64)> {
    vec![
        ("org-second".to_owned(), second.0, second.1),
        ("org-hour".to_owned(), hour.0, hour.1),
    ]
}

/// A user's and an organisation's quota checked together: the organisation runs out first,
/// and from then on the user keeps every permit a denied call would have taken.
#[test]
fn a_denied_batch_keeps_no_permit_of_any_request() {
    let clock = ManualClock::starting_at(Nanos::from_secs(3600 * 1000));
    let policy = Policy::from_toml(USER_AND_ORG, clock.clone()).unwrap();
    let call = [
        Request::new("alice", "user", 1),
        Request::new("acme", "org", 1),
    ];
    let mut trace = Vec::new();
    for _ in 0..5 {
        let batch = policy.check_all(&call).unwrap();
        let user = batch.tiers_of(0).next().unwrap();
        let org: Vec<(String, bool, u64)> = batch
            .tiers_of(1)
            .map(|t| {
                (
                    t.name().to_owned(),
                    t.decision.allowed,
                    t.decision.remaining,
                )
            })
            .collect();
        trace.push((batch.allowed(), user.decision.remaining, org));
        clock.advance(Nanos::from_millis(400));
    }
    assert_eq!(
        trace,
        [
            (true, 4, org((true, 2), (true, 3))),
            (true, 3, org((true, 2), (true, 2))),
            (true, 2, org((true, 2), (true, 1))),
            (true, 1, org((true, 2), (true, 0))),
            // The hour is spent: denied, and alice's permit is not taken (an admitting
            // tier of a denied call reports what it has, untaken).
            (false, 1, org((true, 3), (false, 0))),
        ]
    );
    assert_eq!(policy.peek("alice", "user", 1).unwrap().remaining(), 0);
    // Alice alone still has her one permit left from the denied call.
    assert!(policy.allow("alice", "user", 1).unwrap().allowed());
    assert!(!policy.allow("alice", "user", 1).unwrap().allowed());
}

/// A batch that no rule matches is admitted, unlimited; each request's tiers are told
/// apart, a request no rule matches has none.
#[test]
fn each_request_has_its_own_tiers() {
    let policy = Policy::from_toml(USER_AND_ORG, FnClock(|| Nanos::ZERO)).unwrap();
    let batch = policy
        .check_all(&[
            Request::new("acme", "org", 1),
            Request::new("x", "nowhere", 1),
            Request::new("bob", "user", 2),
        ])
        .unwrap();
    assert_eq!(batch.len(), 3);
    let names = |i: usize| -> Vec<&str> { batch.tiers_of(i).map(|t| t.name()).collect() };
    assert_eq!(names(0), ["org-second", "org-hour"]);
    assert!(names(1).is_empty());
    assert_eq!(names(2), ["user"]);
    assert_eq!(batch.tiers_of(2).next().unwrap().decision.remaining, 3);
    assert_eq!(batch.tiers_of(3).count(), 0);
    let none = policy.check_all(&[]).unwrap();
    assert!(none.allowed() && none.is_empty());
    assert_eq!(none.decision.limit(), u64::MAX);
}

/// Two requests naming one key (the same client twice, or two clients under a shared
/// rule) are one tier charged both: both list it, with the one answer.
#[test]
fn a_key_two_requests_share_is_charged_both_at_once() {
    const SHARED: &str = r#"
        [[rules]]
        name = "user"
        endpoint = "user"
        limit = 5
        window = "1m"
        algorithm = "fixed_window"

        [[rules]]
        name = "upload"
        endpoint = "upload"
        per = "global"
        limit = 4
        window = "1m"
        algorithm = "fixed_window"
    "#;
    let policy = Policy::from_toml(SHARED, FnClock(|| Nanos::ZERO)).unwrap();
    let batch = policy
        .check_all(&[
            Request::new("bob", "user", 2),
            Request::new("bob", "user", 1),
            Request::new("a", "upload", 1),
            Request::new("b", "upload", 2),
        ])
        .unwrap();
    assert!(batch.allowed());
    assert_eq!(batch.decision.tiers().len(), 2);
    let remaining =
        |i: usize| -> Vec<u64> { batch.tiers_of(i).map(|t| t.decision.remaining).collect() };
    assert_eq!(
        [remaining(0), remaining(1), remaining(2), remaining(3)],
        [vec![2], vec![2], vec![1], vec![1]]
    );
    // The next such batch needs 3 of bob's 2 left: denied, nothing taken.
    let again = policy
        .check_all(&[
            Request::new("bob", "user", 2),
            Request::new("bob", "user", 1),
        ])
        .unwrap();
    assert!(!again.allowed());
    assert!(policy
        .check_all(&[Request::new("bob", "user", 2)])
        .unwrap()
        .allowed());
}

/// More tiers than one check decides, more requests than that, or a cost no tier can
/// admit: a typed error, and nothing is taken.
#[test]
fn a_batch_that_cannot_be_decided_takes_nothing() {
    let policy = Policy::from_toml(USER_AND_ORG, FnClock(|| Nanos::ZERO)).unwrap();
    let org = Request::new("acme", "org", 1);
    let orgs = ["o1", "o2", "o3", "o4", "o5"];
    let five_orgs = orgs.map(|o| Request::new(o, "org", 1)); // 10 tiers
    assert_eq!(
        policy.check_all(&five_orgs),
        Err(BatchError::TooLarge { requests: 5 })
    );
    let nine = [Request::new("x", "nowhere", 1); MAX_TIERS + 1];
    assert_eq!(
        policy.check_all(&nine),
        Err(BatchError::TooLarge { requests: 9 })
    );
    let too_costly = [org, Request::new("bob", "user", 6)];
    assert_eq!(
        policy.check_all(&too_costly),
        Err(BatchError::Capacity(InsufficientCapacity { max_cost: 5 }))
    );
    assert_eq!(
        policy.check_all(&five_orgs).unwrap_err().to_string(),
        "5 requests match more than the 8 tiers one check decides"
    );
    // One key named twice is charged both costs: 3 + 3 is more than its 5 can admit.
    let twice = [
        Request::new("bob", "user", 3),
        Request::new("bob", "user", 3),
    ];
    assert_eq!(
        policy.check_all(&twice),
        Err(BatchError::Capacity(InsufficientCapacity { max_cost: 5 }))
    );
    // Nothing was taken by any of them: the keys peek as fresh ones do.
    let fresh = Policy::from_toml(USER_AND_ORG, FnClock(|| Nanos::ZERO)).unwrap();
    for (client, endpoint) in [("acme", "org"), ("o1", "org"), ("bob", "user")] {
        assert_eq!(
            policy.peek(client, endpoint, 1).unwrap(),
            fresh.peek(client, endpoint, 1).unwrap()
        );
    }
}

/// Random batches of one to three requests (every algorithm of `RULES`, the same key twice
/// in a batch too, costs 1 to 3, and 0 alone, time moving): the in-process store and the plain
/// reference store answer every batch identically, and after every batch of requests
/// that share no key, every key is exactly where a model leaves it that checks the
/// requests one by one and refunds the admitted ones when any was denied.
#[test]
fn batches_decide_as_the_reference_and_leave_what_the_model_leaves() {
    let clients = ["a", "b", "vip", "c"];
    let endpoints = ["/", "/search", "/upload"];
    for seed in 1..=20u64 {
        let clock = ManualClock::starting_at(Nanos::from_secs(1_000_000));
        let ours = Policy::from_toml(RULES, clock.clone()).unwrap();
        let plain = Policy::from_toml(RULES, clock.clone())
            .unwrap()
            .store(MapStore::default());
        let model = Policy::from_toml(RULES, clock.clone()).unwrap();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let (mut admitted, mut modelled) = (0, 0);
        for step in 0..400 {
            clock.advance(Nanos::from_millis(rng.below(4) * rng.below(200)));
            let len = 1 + rng.below(3) as usize;
            let batch = random_batch(&mut rng, len, &clients, &endpoints);
            // The model applies where no two requests share a key (distinct clients, one
            // shared "/upload" at most): a shared key is charged both costs at once, which
            // for a leaky bucket's queue or a cost of 0 is not two checks in a row.
            let shares = batch.iter().enumerate().any(|(i, r)| {
                batch[..i].iter().any(|q| {
                    q.client == r.client || (q.endpoint == "/upload" && r.endpoint == "/upload")
                })
            });
            let expected = plain.check_all(&batch);
            let got = ours.check_all(&batch);
            assert_eq!(got, expected, "seed {seed} step {step}: {batch:?}");
            let Ok(got) = got else { continue };
            if shares {
                // Kept in step: the model's state is the reference's.
                model.check_all(&batch).unwrap();
                continue;
            }
            modelled += 1;
            // The model: one by one, then the admitted ones given back if any was denied.
            let singles: Vec<bool> = batch
                .iter()
                .map(|r| model.allow(r.client, r.endpoint, r.cost).unwrap().allowed())
                .collect();
            let all = singles.iter().all(|&a| a);
            assert_eq!(got.allowed(), all, "seed {seed} step {step}: {batch:?}");
            if !all {
                for (r, _) in batch.iter().zip(&singles).filter(|(_, &a)| a) {
                    model.refund(r.client, r.endpoint, r.cost);
                }
            } else {
                admitted += 1;
            }
            for client in clients {
                for endpoint in endpoints {
                    assert_eq!(
                        ours.peek(client, endpoint, 1).unwrap(),
                        model.peek(client, endpoint, 1).unwrap(),
                        "seed {seed} step {step}: {client} {endpoint} after {batch:?}"
                    );
                }
            }
        }
        assert!(admitted > 50, "seed {seed}: the trace admits ({admitted})");
        assert!(modelled > 150, "seed {seed}: the model checks ({modelled})");
    }
}

/// One to three requests of random clients, endpoints and costs (0 alone only).
fn random_batch<'a>(
    rng: &mut Rng,
    len: usize,
    clients: &[&'a str],
    endpoints: &[&'a str],
) -> Vec<Request<'a>> {
    (0..len)
        .map(|_| {
            let cost = if len == 1 {
                [1, 1, 2, 0, 3][rng.below(5) as usize]
            } else {
                [1, 1, 2, 3][rng.below(4) as usize]
            };
            Request::new(
                clients[rng.below(4) as usize],
                endpoints[rng.below(3) as usize],
                cost,
            )
        })
        .collect()
}

/// Four threads each call with their own user and the one shared organisation: exactly the
/// organisation's hour of calls is admitted, and every user keeps every permit of its
/// denied calls.
#[test]
fn threads_sharing_a_quota_admit_exactly_it_and_keep_the_rest() {
    const RULES: &str = r#"
        [[rules]]
        name = "user"
        endpoint = "user"
        limit = 10000
        window = "1h"
        algorithm = "fixed_window"

        [[rules]]
        name = "org"
        endpoint = "org"
        limit = 1000
        window = "1h"
        algorithm = "gcra"
    "#;
    let policy = Arc::new(Policy::from_toml(RULES, FnClock(|| Nanos::from_secs(7200))).unwrap());
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (policy, admitted) = (Arc::clone(&policy), Arc::clone(&admitted));
            std::thread::spawn(move || {
                let user = format!("user-{t}");
                let mut mine = 0u64;
                for _ in 0..1500 {
                    let call = [
                        Request::new(&user, "user", 1),
                        Request::new("acme", "org", 1),
                    ];
                    if policy.check_all(&call).unwrap().allowed() {
                        mine += 1;
                    }
                }
                admitted.fetch_add(mine, Ordering::Relaxed);
                (user, mine)
            })
        })
        .collect();
    for thread in threads {
        let (user, mine) = thread.join().unwrap();
        assert_eq!(
            policy.peek(&user, "user", 1).unwrap().remaining(),
            10000 - mine - 1, // a peek reports what would remain after it
            "{user} kept the permits of its denied calls"
        );
    }
    assert_eq!(admitted.load(Ordering::Relaxed), 1000);
}
