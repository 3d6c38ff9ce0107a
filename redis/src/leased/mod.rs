//! [`LeasedStore`]: a [`RedisStore`] whose hot keys are served from leases held in this
//! process, with a stated bound on how far a fleet can overshoot: the type, its state and
//! its checks. Which keys are hot is `heat`, their slots `slot`, the check path's spends
//! `spend`, the lease thread `keeper`, permits in transit `ledger`.

mod heat;
mod keeper;
mod ledger;
mod policy_clock;
mod slot;
mod spend;
mod stats;

use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};

use crossbeam_utils::CachePadded;

use self::heat::hot_count;
use self::ledger::{Orphan, PendingOp};
use self::slot::{identity, Slot};
use self::spend::Answer;
use self::stats::LeaseCounters;
pub use self::stats::LeaseStats;
use super::store::{store_by_io, Io};
use super::{BuildError, LeaseConfig, RedisStore};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use tollgate::policy::{Op, Plan, TierOutcome, MAX_TIERS};
use tollgate::Nanos;

/// A [`Store`](tollgate::policy::Store) that serves a fleet's hot keys at in-process speed: a key this process
/// checks often gets a *lease*, a slice of its quota taken from Redis in one script call,
/// and the process admits from the slice locally, lock-free, until it runs low and the
/// lease thread takes the next one ahead of time. Cold keys go to the wrapped
/// [`RedisStore`] on every check, as without leases.
///
/// ```no_run
/// use tollgate::policy::Policy;
/// use tollgate::MonotonicClock;
/// use tollgate_redis::{LeaseConfig, LeasedStore, RedisConfig, RedisStore, RedisTarget};
/// let redis = RedisStore::new(
///     RedisTarget::Single("redis://127.0.0.1:6379".into()),
///     RedisConfig::new("api")?,
/// )?;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "everyone"
///     per = "global"
///     limit = 100000
///     window = "1s"
///     algorithm = "fixed_window"
/// "#, MonotonicClock::new())?
/// .store(LeasedStore::new(redis, LeaseConfig::new())?);
/// assert!(policy.allow("alice", "/search", 1)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// ## How a key is leased
///
/// Each tier of a check is one *key* here: the tier's version and the Redis key it is
/// kept under. Per key:
///
/// 1. **Cold.** The check goes to Redis. The checks Redis admits for the key are counted
///    per 100 ms (in a table of counters each tagged with the key it counts, so keys that
///    share a counter do not add up); when they reach [`LeaseConfig::with_hot_rate`] per
///    second the key is hot and claims one of [`LeaseConfig::with_slots`] slots (a key finding
///    both its candidate slots held by other keys stays cold). A request costing more than
///    the key's lease cap never makes it hot, nor does a leaky bucket's key: each request
///    it admits carries a delay, its place in the queue, which only the key's state in
///    Redis can give, so a leaky bucket is decided by Redis on every check.
/// 2. **Leased.** The lease thread takes a lease: a check of cost `n` on the key's state in
///    Redis, so Redis records `n` permits taken, exactly as `n` requests would. `n` is the
///    key's local rate (the hot rate for its first lease) times
///    [`LeaseConfig::with_horizon`], within
///    [`max_lease_for`](LeaseConfig::max_lease_for) minus what the slot still holds; if
///    fewer than `n` are left, it takes what is left. Checks then spend the slot's permits
///    with one compare-and-swap ([`LeaseCell`]): no round trip, no lock, no allocation.
/// 3. **Refilled ahead of time.** A spend that leaves the slot below half a lease wakes the
///    lease thread, which takes the next lease while the rest is spent.
/// 4. **Reviewed, then returned.** Every [`LeaseConfig::with_ttl`] the lease thread keeps
///    what one horizon of the key's current rate needs and gives the rest back to Redis by
///    the core's refund (the permits kept stay spendable throughout: no round trip on the
///    check path). A key with no check for a TTL gives everything back and frees its slot;
///    so does every key when the store is dropped.
///
/// A check whose tiers are partly leased spends the leased ones locally and sends the rest
/// to Redis in one call; if Redis denies, the local permits are put back (all or nothing).
/// A check a lease cannot cover (the slot ran dry, the key's limit is spent) goes to Redis,
/// whose answer is exact; [`RedisStore`]'s deny cache absorbs a flood of such denies.
///
/// ## The bound
///
/// Permits are counted in Redis when they are leased, so Redis never records more than the
/// algorithm allows. What a fleet *admits* exceeds that only by permits leased earlier and
/// spent later: with `P` processes, per key, where `cap` is
/// [`max_lease_for`](LeaseConfig::max_lease_for)`(limit, max_cost)` (the most one process
/// holds at once: a lease never brings the slot above it, and permits a denied check gives
/// back go to Redis instead when the slot is full again) and `limit` what the tier admits
/// at once (a window's limit; the burst of a GCRA or token bucket):
///
/// - fixed window, sliding window counter: at most `limit + P × cap` in each window;
/// - sliding window log: at most `limit + P × cap` in any interval one window long;
/// - GCRA, token bucket: at most `burst + rate × Δ + P × cap` over any interval Δ;
/// - leaky bucket: never leased (see above).
///
/// Denies are exact to the same bound: a request is denied only when this process's lease
/// cannot cover it (it holds fewer permits than the request costs) and Redis denies it.
/// A caller's decisions at one instant are monotone: a deny from Redis closes the key's
/// lease in this process up to that instant, so a lease arriving meanwhile cannot admit a
/// request at the instant another was refused. Permits a process leases and never uses
/// count as used in Redis until it returns them: a lease in hand when a process dies
/// (`kill -9`) is never returned, and its permits are lost to the fleet until the key's
/// state frees them (the window ends, the bucket drains), at most one lease per process.
///
/// `remaining` counts what this process holds: Redis' answer (a peek, or a check Redis
/// decided) plus the permits in its lease, when no lease was on its way meanwhile
/// (otherwise Redis' answer alone: low, never high); a locally admitted request reports
/// the permits held plus what Redis had left at its last answer (other processes' leases
/// are not seen). `reset_after` is Redis' answer to the last lease, aged. Refunds and
/// charges go to Redis.
///
/// ## Failures
///
/// A lease is only what Redis granted: when Redis is unreachable, no lease is taken, the
/// permits in hand are spent, and then checks go to the wrapped store, whose
/// [`FailurePolicy`](super::FailurePolicy) answers. Permits Redis cannot take back (a review
/// or an idle key during the outage) stay in hand, spendable, and go back when Redis does;
/// only at shutdown are they dropped (they stay counted in Redis: the strict side, nothing
/// counted twice). When Redis is back, keys are leased again as they are checked: no
/// restart, no resynchronisation.
///
/// ## Accounting across stalls
///
/// A lease or a return that times out (a stalled server) may still run: it is followed to
/// its outcome, in the background, for up to a minute. Sent during the stall, it reaches
/// the script past its deadline and changes nothing (see "Deadlines" on [`RedisStore`]);
/// run in time but answered late, its grant goes into the slot it was for (or back to
/// Redis), and permits Redis did not take back go into their slot again (or are queued
/// back to Redis, tried at every tick). [`LeaseStats::unsettled_permits`] counts what is in
/// transit; whenever nothing is, what Redis counts for the store's keys is exactly what
/// the store admitted from leases, plus what it holds ([`LeaseStats::held_permits`]), plus
/// what it lost ([`LeaseStats::lost_permits`]: only at shutdown, Redis unreachable). A
/// call whose connection broke with it in flight leaves its outcome unknown: counted in
/// [`LeaseStats::unknown_permits`]. Permits a denied check spent from a lease and cannot
/// put back into it go back to Redis the same way, from the lease thread.
///
/// With a client [`TimeSource`](super::TimeSource), the lease thread decides at the last
/// instant a check passed, advanced by the real time since.
///
/// [`LeaseCell`]: tollgate::lease::LeaseCell
#[derive(Debug)]
pub struct LeasedStore {
    inner: Arc<Inner>,
    keeper: Option<JoinHandle<()>>,
}

/// What the store's checks and its lease thread share.
#[derive(Debug)]
struct Inner {
    redis: RedisStore,
    config: LeaseConfig,
    slots: Box<[CachePadded<Slot>]>,
    /// Checks per key per heat period, indexed by a hash of the key:
    ///
    /// ```text
    /// 63            44 43       32 31                             0
    /// [ period: 20   | tag: 12   | count: 32                      ]
    /// ```
    ///
    /// (the period of 100 ms and a tag of the key's hash, compared for equality only;
    /// see `heat.rs`).
    heat: Box<[AtomicU64]>,
    /// Checks within one heat period that make a key hot.
    hot_count: u64,
    /// Held while a hot key claims a slot (rare), so a key never claims two.
    claiming: Mutex<()>,
    /// The lease thread, to wake.
    keeper: OnceLock<Thread>,
    /// Set when the store is dropped.
    stop: AtomicBool,
    /// The last `now` a check passed, for the lease thread's calls (a client time source
    /// decides at it).
    seen_now: AtomicU64,
    /// Lease operations that timed out, until their outcome comes (the lease thread's).
    pending: Mutex<Vec<PendingOp>>,
    /// Permits out of every slot that Redis still counts as leased, to go back (tried by
    /// the lease thread at every tick).
    orphans: Mutex<Vec<Orphan>>,
    /// The last claim's number (see [`Keep::epoch`](slot::Keep::epoch)).
    claims: AtomicU64,
    counters: LeaseCounters,
}

impl LeasedStore {
    /// Leases hot keys of `redis` per `config` (rejected with
    /// [`BuildError::InvalidLease`] when a setting is out of range). Starts the lease
    /// thread, which returns every lease in hand when the store is dropped.
    pub fn new(redis: RedisStore, config: LeaseConfig) -> Result<LeasedStore, BuildError> {
        config.validate()?;
        let slots = config.slots().next_power_of_two();
        let heat = (slots * 4).max(64);
        let hot_count = hot_count(config.hot_rate());
        let inner = Arc::new(Inner {
            redis,
            slots: (0..slots).map(|_| CachePadded::new(Slot::new())).collect(),
            heat: (0..heat).map(|_| AtomicU64::new(0)).collect(),
            hot_count,
            claiming: Mutex::new(()),
            keeper: OnceLock::new(),
            stop: AtomicBool::new(false),
            seen_now: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
            orphans: Mutex::new(Vec::new()),
            claims: AtomicU64::new(0),
            counters: LeaseCounters::new(),
            config,
        });
        let keeper = {
            let inner = Arc::clone(&inner);
            thread::Builder::new()
                .name("tollgate-lease".into())
                .spawn(move || inner.keep_leases())
                .map_err(|e| BuildError::Runtime(e.to_string()))?
        };
        // Set once, here, before any check can run.
        let _ = inner.keeper.set(keeper.thread().clone());
        Ok(LeasedStore {
            inner,
            keeper: Some(keeper),
        })
    }

    /// The wrapped store.
    pub fn redis(&self) -> &RedisStore {
        &self.inner.redis
    }

    /// The store whose keys a scan lists: the wrapped one (a lease's permits are kept
    /// under the same keys).
    pub(crate) fn scanner(&self) -> &RedisStore {
        self.redis()
    }

    /// Drops the cached denies of `client` (`None`: of the global rules' keys): the
    /// wrapped store's [`RedisStore::forget_denies`]. Permits this process holds in leases
    /// are not touched.
    pub fn forget_denies(&self, client: Option<&str>) -> usize {
        self.inner.redis.forget_denies(client)
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.inner.config
    }
}

impl Drop for LeasedStore {
    /// Stops the lease thread, which first gives every lease in hand back to Redis.
    fn drop(&mut self) {
        // Relaxed: the unpark and join below order it.
        self.inner.stop.store(true, Ordering::Relaxed);
        if let Some(keeper) = self.keeper.take() {
            keeper.thread().unpark();
            // A panicked lease thread has nothing left to return.
            let _ = keeper.join();
        }
    }
}

impl LeasedStore {
    /// The check of [`run_io`](Self::run_io): the tiers with a lease in hand spend from it; the
    /// rest go to Redis in one operation; a deny gives the local spends back.
    async fn check_io(&self, plan: &Plan<'_>, now: Nanos, outcomes: &mut [TierOutcome], io: Io) {
        let inner = &*self.inner;
        let mut spent: [Option<(usize, u32)>; MAX_TIERS] = [None; MAX_TIERS];
        let mut remote = Plan::new();
        let mut remote_of = [0usize; MAX_TIERS];
        let mut ids = [0u64; MAX_TIERS];
        for (i, p) in plan.iter().enumerate() {
            let id = identity(p);
            ids[i] = id;
            match inner.spend(id, p, now) {
                Some((s, generation, decision)) => {
                    spent[i] = Some((s, generation));
                    outcomes[i].decision = decision;
                }
                None => {
                    remote_of[remote.len()] = i;
                    remote.push(*p);
                }
            }
        }
        if remote.is_empty() {
            inner.counters.local.add(1);
            return;
        }
        inner.counters.remote.add(1);
        // Slots past `remote.len()` are never read: any outcome fills them.
        // (Copies of this check's outcomes: they live within the check, while the plan's
        // rule set is held.)
        let mut sub: [TierOutcome; MAX_TIERS] =
            core::array::from_fn(|j| outcomes[remote_of[j.min(remote.len() - 1)]].duplicate());
        let mut grants = [None; MAX_TIERS];
        for &i in &remote_of[..remote.len()] {
            grants[i] = inner.grants_of(ids[i]);
        }
        let clean = inner
            .redis
            .check_io(&remote, now, &mut sub[..remote.len()], io)
            .await;
        for (j, &i) in remote_of[..remote.len()].iter().enumerate() {
            outcomes[i].decision = sub[j].decision;
            let answer = Answer::Check { clean };
            inner.answered(ids[i], grants[i], now, &mut outcomes[i].decision, answer);
        }
        // Heat counts the tiers Redis admitted: a key over its limit (or a flood of
        // denies answered by the deny cache) has nothing to lease.
        for (j, p) in remote.iter().enumerate() {
            if sub[j].decision.allowed {
                inner.heat(ids[remote_of[j]], p, now);
            }
        }
        if !sub[..remote.len()].iter().all(|o| o.decision.allowed) {
            inner.undo(&spent[..plan.len()], plan, now, outcomes);
        }
    }
}

impl LeasedStore {
    /// [`Store::run`](tollgate::policy::Store::run) by `io`: a check spends its leases in hand at once and goes to Redis
    /// only for the rest (and for a deny's give-back that no lease can take). A peek goes to
    /// Redis, whose answer counts the permits leased by every process as used; so do a
    /// refund (the permits of a locally admitted request were taken there with its lease)
    /// and a charge.
    async fn run_io(
        &self,
        op: Op,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        io: Io,
    ) {
        match op {
            Op::Check => self.check_io(plan, now, outcomes, io).await,
            Op::Peek => {
                let mut grants = [None; MAX_TIERS];
                for (p, g) in plan.iter().zip(grants.iter_mut()) {
                    *g = self.inner.grants_of(identity(p));
                }
                let clean = self.inner.redis.peek_io(plan, now, outcomes, io).await;
                for ((p, outcome), g) in plan.iter().zip(outcomes.iter_mut()).zip(grants) {
                    let decision = &mut outcome.decision;
                    let answer = Answer::Peek { clean };
                    self.inner.answered(identity(p), g, now, decision, answer);
                }
            }
            Op::Refund | Op::Charge => self.inner.redis.run_io(op, plan, now, outcomes, io).await,
            Op::Reset => {
                self.inner.revoke(plan);
                self.inner.redis.run_io(op, plan, now, outcomes, io).await
            }
        }
    }
}

store_by_io!(
    /// Each operation written once (`run_io`), run blocking or
    /// awaited.
    LeasedStore
);
