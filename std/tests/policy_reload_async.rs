//! A reload never waits on a check in flight (issue 27, item 1), and a check in flight
//! finishes on the rule set it started with.
//!
//! The checks here are suspended in the middle, as an awaited check on a network store is
//! while its round trip is under way: a store that parks every awaited check until the
//! test lets it go, then decides it in process ([`InProcess`], the policy's own tables). A
//! reload that waited for such a check on the runtime thread that must poll it would never
//! return; a watchdog turns that hang into a failure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Semaphore;
use tollgate::policy::{
    InProcess, Op, Plan, Policy, PolicyCheck, ReloadStep, RuleSet, Store, TierOutcome,
};
use tollgate::{InsufficientCapacity, ManualClock, Nanos};

/// A store whose awaited operations wait for a permit of `gate` (one per operation), then
/// run in process; its blocking ones run at once. `parked` counts awaited operations
/// waiting at the gate.
#[derive(Debug)]
struct Parking {
    inner: InProcess,
    gate: Arc<Semaphore>,
    parked: AtomicUsize,
}

impl Parking {
    fn new() -> Parking {
        Parking {
            inner: InProcess::new(),
            gate: Arc::new(Semaphore::new(0)),
            parked: AtomicUsize::new(0),
        }
    }

    async fn wait(&self) {
        self.parked.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.expect("gate open").forget();
        self.parked.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Store for Parking {
    fn run(
        &self,
        op: Op,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.inner.run(op, plan, now, outcomes)
    }

    fn reload(&self, step: ReloadStep<'_>) {
        self.inner.reload(step);
    }

    async fn run_async<'a>(
        &'a self,
        op: Op,
        plan: &'a Plan<'a>,
        now: Nanos,
        outcomes: &'a mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.wait().await;
        self.inner.run(op, plan, now, outcomes)
    }
}

fn rules(limit: u64) -> String {
    format!(
        "[[rules]]\nname = \"api\"\nlimit = {limit}\nwindow = \"1h\"\nalgorithm = \"fixed_window\"\n"
    )
}

/// Fails the test (the whole binary: a hung thread cannot be unwound) if `what` has not
/// finished within a minute. Not a timed assertion: a healthy run takes milliseconds, and
/// the limit only turns a hang into a failure.
fn watchdog(what: &'static str) -> Arc<()> {
    let alive = Arc::new(());
    let watched = Arc::downgrade(&alive);
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        if watched.upgrade().is_some() {
            eprintln!("hung: {what}");
            std::process::abort();
        }
    });
    alive
}

/// Waits (yielding to the runtime) until `n` operations are parked at `store`'s gate.
async fn parked(store: &Parking, n: usize) {
    while store.parked.load(Ordering::SeqCst) < n {
        tokio::task::yield_now().await;
    }
}

type Parked = Policy<ManualClock, Parking>;

fn parked_policy(limit: u64) -> Arc<Parked> {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
    Arc::new(
        Policy::from_toml(&rules(limit), clock)
            .unwrap()
            .store(Parking::new()),
    )
}

/// On a current-thread runtime (one thread polls everything), a check parked in the middle
/// of its store call, then a reload on that thread: the reload returns at once (it used to
/// wait for the parked check, which only this thread can poll: a hang), the parked check
/// then finishes on the rules it matched (limit 2: its key is held there), and the next
/// check runs on the new rules (limit 5) with both earlier permits counted.
#[test]
fn a_reload_on_the_runtime_thread_never_waits_for_a_parked_check() {
    let _watchdog = watchdog("a reload waiting for a parked check on its own thread");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let policy = parked_policy(2);
        assert!(policy.allow("c", "/", 1).unwrap().allowed());
        let first = {
            let policy = Arc::clone(&policy);
            tokio::spawn(async move { policy.allow_async("c", "/", 1).await })
        };
        parked(policy.backend(), 1).await;
        // The check is suspended mid-check, on the old rules: reload on this thread.
        policy.reload_toml(&rules(5)).unwrap();
        policy.backend().gate.add_permits(1);
        let first = first.await.unwrap().unwrap();
        assert!(first.allowed());
        assert_eq!((first.limit(), first.remaining()), (2, 0), "the old rules");
        let next = policy.allow("c", "/", 1).unwrap();
        assert!(next.allowed());
        assert_eq!((next.limit(), next.remaining()), (5, 2), "the new rules");
    });
}

/// On a multi-thread runtime with two workers, two checks parked, then two reloads at once
/// (one per worker): both return, every parked check finishes, and the rule set the checks
/// started on is reclaimed once the last of them is done (not before).
#[test]
fn concurrent_reloads_never_wait_and_the_old_set_is_reclaimed_after_its_last_check() {
    let _watchdog = watchdog("two reloads on two workers, checks parked");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    runtime.block_on(async {
        let policy = parked_policy(10);
        // The key is held by the old rules' store, so the parked checks decide there.
        assert!(policy.allow("c", "/", 1).unwrap().allowed());
        let old: Weak<RuleSet> = Arc::downgrade(&policy.rule_set());
        let checks: Vec<_> = (0..2)
            .map(|_| {
                let policy = Arc::clone(&policy);
                tokio::spawn(async move { policy.allow_async("c", "/", 1).await })
            })
            .collect();
        parked(policy.backend(), 2).await;
        let reloads: Vec<_> = [20, 30]
            .into_iter()
            .map(|limit| {
                let policy = Arc::clone(&policy);
                tokio::spawn(async move { policy.reload_toml(&rules(limit)) })
            })
            .collect();
        for reload in reloads {
            reload.await.unwrap().unwrap();
        }
        assert!(
            old.upgrade().is_some(),
            "the old rule set is still in use by the parked checks"
        );
        policy.backend().gate.add_permits(1);
        let mut done = Vec::new();
        let mut checks = checks.into_iter();
        let first = checks.next().unwrap();
        let second = checks.next().unwrap();
        // One check finishes; the other still holds the old set.
        while !first.is_finished() && !second.is_finished() {
            tokio::task::yield_now().await;
        }
        let (finished, pending) = if first.is_finished() {
            (first, second)
        } else {
            (second, first)
        };
        done.push(finished.await.unwrap().unwrap());
        assert!(old.upgrade().is_some(), "one check still holds the old set");
        policy.backend().gate.add_permits(1);
        done.push(pending.await.unwrap().unwrap());
        for d in &done {
            assert!(d.allowed());
            assert_eq!(d.limit(), 10, "decided on the rules they started with");
        }
        drop(done);
        assert!(
            old.upgrade().is_none(),
            "the old rule set is reclaimed when its last check is done"
        );
        // Whichever reload published last is in force; the earlier permits count.
        let next = policy.allow("c", "/", 1).unwrap();
        assert!([20, 30].contains(&next.limit()), "{next:?}");
        assert_eq!(next.remaining(), next.limit() - 4);
    });
}
