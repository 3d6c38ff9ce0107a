//! [`LeasedStore`]: a [`RedisStore`] whose hot keys are served from leases held in this
//! process, with a stated bound on how far a fleet can overshoot.

use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::keys::TierKey;
use super::store::{finish, Io, LeaseOp, LeaseReply, PendingLease};
use super::{BuildError, LeaseConfig, RedisStats, RedisStore};
use crate::lease::{LeaseCell, Spend};
use crate::policy::{AsyncStore, Plan, PlannedTier, Store, StripedCounter, TierOutcome, MAX_TIERS};
use crate::sync::plain::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, Mutex};
use crate::{Decision, InsufficientCapacity, Nanos};

/// A [`Store`] that serves a fleet's hot keys at in-process speed: a key this process
/// checks often gets a *lease*, a slice of its quota taken from Redis in one script call,
/// and the process admits from the slice locally, lock-free, until it runs low and the
/// lease thread takes the next one ahead of time. Cold keys go to the wrapped
/// [`RedisStore`] on every check, as without leases.
///
/// ```no_run
/// use tollgate::policy::Policy;
/// use tollgate::MonotonicClock;
/// use tollgate::redis::{LeaseConfig, LeasedStore, RedisConfig, RedisStore, RedisTarget};
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
///    the key's lease cap never makes it hot.
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
/// limit. What a fleet *admits* in a window can exceed it only by permits leased earlier and
/// spent in this window: with `P` processes, at most
///
/// > admitted in any window ≤ `limit + P × max_lease_for(limit, max_cost)`
///
/// per key, where [`max_lease_for`](LeaseConfig::max_lease_for) is the most one process
/// holds at once (a lease never brings the slot above it, and permits a denied check gives
/// back go to Redis instead when the slot is full again). Denies are exact to the same
/// bound: a request is denied only when this process's lease cannot cover it (it holds
/// fewer permits than the request costs) and Redis denies it. Permits a process leases and
/// never uses count as used in Redis until it returns them: a lease in hand when a process
/// dies (`kill -9`) is never returned, and its permits are lost to the fleet until the
/// key's state frees them (the window ends, the bucket drains), at most one lease per
/// process.
///
/// What a locally admitted request reports is the **local view**: `remaining` is what the
/// slot holds plus what Redis had left after the last lease (other processes may have taken
/// some since), `reset_after` Redis' answer to the last lease, aged. Peeks, refunds and
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
    /// Checks per key per heat period, `[period: 32 | count: 32]`, indexed by key.
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
    /// The last claim's number (see [`Keep::epoch`]).
    claims: AtomicU64,
    counters: LeaseCounters,
}

/// A lease operation whose answer did not come within the timeout (see
/// [`RedisStore::lease_op`](super::RedisStore)).
#[derive(Debug)]
struct PendingOp {
    /// The slot and claim epoch the permits are for (a lease) or came from (a return).
    from: Option<(usize, u64)>,
    target: TierKey,
    op: LeaseOp,
    permits: u64,
    reply: PendingLease,
}

/// Permits of `target` to give back to Redis.
#[derive(Debug)]
struct Orphan {
    target: TierKey,
    permits: u64,
}

/// One slot for a hot key.
#[derive(Debug)]
struct Slot {
    cell: LeaseCell,
    /// Set by a spender that wants a lease (the slot ran low or dry); cleared by the lease
    /// thread once served.
    asked: AtomicBool,
    /// Below this many permits, a spend asks for the next lease.
    low_water: AtomicU64,
    /// The local view after the last lease: Redis' remaining, and the policy-clock instant
    /// at which its `reset_after` ends; the tier's limit.
    view_remaining: AtomicU64,
    view_reset_at: AtomicU64,
    limit: AtomicU64,
    /// The most permits the slot holds (its key's `max_lease_for`).
    cap: AtomicU64,
    /// The lease thread's bookkeeping (a claiming check writes the target once).
    keep: Mutex<Keep>,
}

/// What the lease thread knows of a slot.
#[derive(Debug, Default)]
struct Keep {
    /// The key's tier in Redis; `None` until the claiming check has written it.
    target: Option<TierKey>,
    /// When the lease in hand is next reviewed; `None`: no lease in hand.
    review_at: Option<Instant>,
    /// Permits granted since the slot was claimed, and returned; what the slot holds then
    /// tells what was spent.
    granted: u64,
    returned: u64,
    /// Spent (granted, minus returned, minus held) when last looked at, and at `mark`
    /// (the last lease), for the local rate.
    last_spent: u64,
    spent_at_mark: u64,
    mark: Option<Instant>,
    /// Last time the key's spends moved.
    active: Option<Instant>,
    /// Not before this may a lease be asked of Redis again (after a deny or a failure).
    next_try: Option<Instant>,
    /// Which claim of the slot this is (from 1; 0: free): a lease operation settled late
    /// touches the slot only if it is still the claim the operation was for.
    epoch: u64,
}

/// Live counters of a [`LeasedStore`].
#[derive(Debug, Default)]
struct LeaseCounters {
    /// Striped: every locally answered check counts here, from every thread.
    local: StripedCounter,
    remote: AtomicU64,
    leases: AtomicU64,
    leased: AtomicU64,
    returned: AtomicU64,
    lost: AtomicU64,
    unknown: AtomicU64,
    unsettled: AtomicU64,
}

/// A snapshot of a [`LeasedStore`]'s counters since it was built.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Checks answered from leases alone (no round trip).
    pub local_checks: u64,
    /// Checks that went to Redis (at least one tier not covered by a lease).
    pub remote_checks: u64,
    /// Leases taken.
    pub leases: u64,
    /// Permits taken by leases.
    pub leased_permits: u64,
    /// Permits given back to Redis (expired, idle or shut-down leases).
    pub returned_permits: u64,
    /// Permits Redis counts as leased that no process holds or will admit: what could not
    /// be given back by the time the store was dropped (Redis unreachable). They stay
    /// counted in Redis until the key's state frees them.
    pub lost_permits: u64,
    /// Permits of lease operations whose outcome Redis never told (the connection failed
    /// with the call in flight, or no answer within 60 s): Redis may count up to this many
    /// more than the accounting below says.
    pub unknown_permits: u64,
    /// Permits in transit now: of lease operations that timed out and whose answer is still
    /// awaited (the late answer settles them: a grant goes into the slot, a refused call
    /// changes nothing), and permits queued to go back to Redis.
    ///
    /// Whenever none are in transit, what Redis counts for the store's keys is exactly what
    /// the store admitted from leases, plus `held_permits`, plus `lost_permits` (plus at
    /// most `unknown_permits`).
    pub unsettled_permits: u64,
    /// Keys holding a slot now.
    pub hot_keys: u64,
    /// Permits in hand now (leased, not yet spent or returned), over every key.
    pub held_permits: u64,
    /// The wrapped store's counters (its round trips include the leases').
    pub redis: RedisStats,
}

/// Heat is counted per period of this many ns.
const HEAT_PERIOD: u64 = 100_000_000;

/// 64-bit finalizer of splitmix64: spreads a key identity over the slot and heat indices.
#[inline]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The key a tier of a plan is leased under: the rule and tier (by name: a reload that
/// keeps them keeps their leases), the tier's version and the key within the rule.
#[inline]
fn identity(p: &PlannedTier<'_>) -> u64 {
    mix(mix(p.tier.names()) ^ p.tier.version()) ^ mix(p.key)
}

impl LeasedStore {
    /// Leases hot keys of `redis` per `config` (rejected with
    /// [`BuildError::InvalidLease`] when a setting is out of range). Starts the lease
    /// thread, which returns every lease in hand when the store is dropped.
    pub fn new(redis: RedisStore, config: LeaseConfig) -> Result<LeasedStore, BuildError> {
        config.validate()?;
        let slots = config.slots().next_power_of_two();
        let heat = (slots * 4).max(64);
        // hot_rate checks per second, over one heat period, at least one.
        // Truncation: clamped to u32::MAX.
        #[allow(clippy::cast_possible_truncation)]
        let hot_count = (u128::from(config.hot_rate()) * u128::from(HEAT_PERIOD))
            .div_ceil(1_000_000_000)
            .clamp(1, u128::from(u32::MAX)) as u64;
        let inner = Arc::new(Inner {
            redis,
            slots: (0..slots)
                .map(|_| {
                    CachePadded::new(Slot {
                        cell: LeaseCell::new(),
                        asked: AtomicBool::new(false),
                        low_water: AtomicU64::new(0),
                        view_remaining: AtomicU64::new(0),
                        view_reset_at: AtomicU64::new(0),
                        limit: AtomicU64::new(0),
                        cap: AtomicU64::new(0),
                        keep: Mutex::new(Keep::default()),
                    })
                })
                .collect(),
            heat: (0..heat).map(|_| AtomicU64::new(0)).collect(),
            hot_count,
            claiming: Mutex::new(()),
            keeper: OnceLock::new(),
            stop: AtomicBool::new(false),
            seen_now: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
            orphans: Mutex::new(Vec::new()),
            claims: AtomicU64::new(0),
            counters: LeaseCounters::default(),
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

    /// Counters since construction.
    pub fn stats(&self) -> LeaseStats {
        let c = &self.inner.counters;
        // Relaxed: statistics, read one by one.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LeaseStats {
            local_checks: c.local.get(),
            remote_checks: get(&c.remote),
            leases: get(&c.leases),
            leased_permits: get(&c.leased),
            returned_permits: get(&c.returned),
            lost_permits: get(&c.lost),
            unknown_permits: get(&c.unknown),
            unsettled_permits: get(&c.unsettled),
            hot_keys: self
                .inner
                .slots
                .iter()
                .filter(|s| s.cell.owner().is_some())
                .count() as u64,
            held_permits: self.inner.slots.iter().map(|s| s.cell.permits()).sum(),
            redis: self.inner.redis.stats(),
        }
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

impl Inner {
    /// The two slots key `id` may hold.
    #[inline]
    fn probe(&self, id: u64) -> impl Iterator<Item = usize> {
        let mask = self.slots.len() - 1;
        let h = mix(id);
        // Truncation: deliberate where a usize is narrower: it keeps the low bits, which the
        // mask selects.
        #[allow(clippy::cast_possible_truncation)]
        let a = h as usize & mask;
        let b = (h >> 32) as usize & mask;
        core::iter::once(a).chain((b != a).then_some(b))
    }

    /// Wakes the lease thread for `slot` unless it was asked already.
    #[inline]
    fn ask(&self, slot: &Slot, now: Nanos) {
        // Relaxed: a hint; the swap below decides who wakes the thread.
        if slot.asked.load(Ordering::Relaxed) {
            return;
        }
        // Relaxed: the policy's clock for the lease thread's calls, published by the swap
        // below. (At least 1: 0 means no check has told it yet.)
        self.seen_now.store(now.as_u64().max(1), Ordering::Relaxed);
        // AcqRel: pairs with the lease thread's Acquire load, which then sees this
        // check's `seen_now`.
        if !slot.asked.swap(true, Ordering::AcqRel) {
            if let Some(keeper) = self.keeper.get() {
                keeper.unpark();
            }
        }
    }

    /// The local view of a slot holding `held` permits, at `now`.
    #[inline]
    fn view(slot: &Slot, held: u64, now: Nanos) -> Decision {
        // Relaxed: the view is advisory (see "local view" on `LeasedStore`).
        let remaining = slot.view_remaining.load(Ordering::Relaxed);
        let reset_at = slot.view_reset_at.load(Ordering::Relaxed);
        Decision::allow(
            slot.limit.load(Ordering::Relaxed),
            held.saturating_add(remaining),
            Nanos::new(reset_at.saturating_sub(now.as_u64())),
        )
    }

    /// Spends tier `p`'s cost from its lease, if one covers it: the slot and the
    /// generation spent from, and the decision.
    #[inline]
    fn spend(&self, id: u64, p: &PlannedTier<'_>, now: Nanos) -> Option<(usize, u32, Decision)> {
        for s in self.probe(id) {
            let slot = &self.slots[s];
            match slot.cell.spend(id, u64::from(p.cost)) {
                Spend::Taken { left, generation } => {
                    // Relaxed: set by the lease thread with the lease; a stale value only
                    // asks a little early or late.
                    if left < slot.low_water.load(Ordering::Relaxed) {
                        self.ask(slot, now);
                    }
                    return Some((s, generation, Inner::view(slot, left, now)));
                }
                Spend::Short { .. } => {
                    self.ask(slot, now);
                    return None;
                }
                Spend::NotHeld => {}
            }
        }
        None
    }

    /// Counts an admitted check of the cold key `id` (tier `p`); when it turns hot, claims
    /// a slot for it. Heat cells are shared by keys: each remembers a 12-bit tag of the
    /// key it counts, and a check of another key starts the count over, so keys sharing a
    /// cell cannot add up to a hot one.
    fn heat(&self, id: u64, p: &PlannedTier<'_>, now: Nanos) {
        let limit = p.tier.algorithm().limit();
        let cap = self.config.max_lease_for(limit, p.tier.max_cost());
        if u64::from(p.cost) > cap {
            // No lease of this key could ever cover such a request.
            return;
        }
        let h = mix(id ^ 0x9e37_79b9_7f4a_7c15);
        // `[period: 20 | tag: 12 | count: 32]`: periods of 100 ms wrap every 29 hours,
        // and only equality matters.
        let stamp = ((now.as_u64() / HEAT_PERIOD) << 12 | (h >> 52)) & 0xffff_ffff;
        // Truncation: deliberate where a usize is narrower: it keeps the low bits, which the
        // mask (the length is a power of two) selects.
        #[allow(clippy::cast_possible_truncation)]
        let cell = &self.heat[h as usize & (self.heat.len() - 1)];
        // Relaxed: a statistic; the compare-and-swap below re-reads.
        let mut word = cell.load(Ordering::Relaxed);
        let count = loop {
            let count = if word >> 32 == stamp {
                (word & u64::from(u32::MAX))
                    .saturating_add(1)
                    .min(u64::from(u32::MAX))
            } else {
                1
            };
            // Relaxed: counts only, nothing published with them.
            match cell.compare_exchange_weak(
                word,
                stamp << 32 | count,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break count,
                Err(seen) => word = seen,
            }
        };
        if count != self.hot_count {
            return;
        }
        // Claims are rare (a key turning hot): one at a time, so a key never holds two
        // slots.
        let _claiming = lock(&self.claiming);
        if self
            .probe(id)
            .any(|s| self.slots[s].cell.owner() == Some(id.max(1)))
        {
            // Held already (its lease ran dry, or Redis has nothing left).
            return;
        }
        for s in self.probe(id) {
            let slot = &self.slots[s];
            if slot.cell.owner().is_some() || !slot.cell.claim(id) {
                continue;
            }
            // Relaxed: read by spenders after the grant's Release (see `LeaseCell`), and by
            // the lease thread after it locks the bookkeeping written below.
            slot.limit.store(limit, Ordering::Relaxed);
            slot.cap.store(cap, Ordering::Relaxed);
            *lock(&slot.keep) = Keep {
                target: Some(self.redis.tier_key(p)),
                // Relaxed: a unique number; claims are serialised by `claiming`.
                epoch: self.claims.fetch_add(1, Ordering::Relaxed) + 1,
                ..Keep::default()
            };
            self.ask(slot, now);
            return;
        }
    }

    /// The lease thread: serves asks at once, looks at reviews and idle keys every tick,
    /// and returns every lease when the store is dropped.
    fn keep_leases(&self) {
        let mut clock = PolicyClock::default();
        loop {
            thread::park_timeout(self.config.tick());
            // Relaxed: set before the unpark that woke us (or seen at a later tick).
            let stopping = self.stop.load(Ordering::Relaxed);
            for (s, slot) in self.slots.iter().enumerate() {
                if slot.cell.owner().is_none() {
                    continue;
                }
                let mut keep = lock(&slot.keep);
                if keep.target.is_none() {
                    // Claimed, not yet described by its check.
                    continue;
                }
                if stopping {
                    self.retire(s, &mut keep, &mut clock, true);
                    continue;
                }
                self.tend(s, &mut keep, &mut clock);
            }
            if stopping {
                self.finish(&mut clock);
                return;
            }
            // Relaxed: the last instant a check told (see `ask`).
            clock.observe(self.seen_now.load(Ordering::Relaxed));
            self.settle_pending(None);
            self.return_orphans(&clock, false);
        }
    }

    /// At shutdown, after every slot gave its permits back: waits (a timeout each) for the
    /// lease operations still in flight, and gives back what they and the queue hold;
    /// what is still unsettled after that is counted unknown, what Redis would not take
    /// lost.
    fn finish(&self, clock: &mut PolicyClock) {
        let wait = self.redis.config().timeout();
        for _ in 0..3 {
            self.settle_pending(Instant::now().checked_add(wait));
            self.return_orphans(clock, true);
            if lock(&self.pending).is_empty() && lock(&self.orphans).is_empty() {
                return;
            }
        }
        for op in std::mem::take(&mut *lock(&self.pending)) {
            self.unsettle(op.permits);
            self.count(&self.counters.unknown, op.permits);
        }
        for orphan in std::mem::take(&mut *lock(&self.orphans)) {
            self.unsettle(orphan.permits);
            self.count(&self.counters.lost, orphan.permits);
        }
    }

    /// Adds `permits` to a statistic.
    fn count(&self, counter: &AtomicU64, permits: u64) {
        // Relaxed: statistics.
        counter.fetch_add(permits, Ordering::Relaxed);
    }

    /// `permits` no longer unsettled.
    fn unsettle(&self, permits: u64) {
        // Relaxed: a statistic.
        self.counters
            .unsettled
            .fetch_sub(permits, Ordering::Relaxed);
    }

    /// Keeps a lease operation that timed out until its outcome comes (see
    /// [`settle`](Self::settle)).
    fn track(
        &self,
        from: Option<(usize, u64)>,
        target: &TierKey,
        op: LeaseOp,
        permits: u64,
        reply: PendingLease,
    ) {
        self.count(&self.counters.unsettled, permits);
        lock(&self.pending).push(PendingOp {
            from,
            target: target.clone(),
            op,
            permits,
            reply,
        });
    }

    /// Queues `permits` of `target` to go back to Redis (from the lease thread, tried at
    /// every tick): permits out of every slot that Redis still counts as leased.
    fn orphan(&self, target: &TierKey, permits: u64) {
        if permits == 0 {
            return;
        }
        self.count(&self.counters.unsettled, permits);
        let mut orphans = lock(&self.orphans);
        match orphans.iter_mut().find(|o| o.target == *target) {
            Some(o) => o.permits = o.permits.saturating_add(permits),
            None => orphans.push(Orphan {
                target: target.clone(),
                permits,
            }),
        }
    }

    /// Settles the lease operations in flight whose outcome has come (with `until`: every
    /// one, waiting for them until then at most; an outcome still missing then is unknown).
    fn settle_pending(&self, until: Option<Instant>) {
        let pending = std::mem::take(&mut *lock(&self.pending));
        let mut waiting = Vec::new();
        for op in pending {
            let reply = match until {
                None => op.reply.settled(),
                Some(until) => Some(
                    op.reply
                        .wait(until.saturating_duration_since(Instant::now())),
                ),
            };
            match reply {
                None => waiting.push(op),
                Some(reply) => {
                    // Unsettled only once what follows from it is accounted (in a slot, or
                    // in transit again), so the count never dips through zero meanwhile.
                    let permits = op.permits;
                    self.settle(op, reply);
                    self.unsettle(permits);
                }
            }
        }
        lock(&self.pending).extend(waiting);
    }

    /// What a lease operation that timed out did, now that it is known: a lease Redis
    /// granted late goes into the slot it was for (if that still holds the key's lease,
    /// up to the cap) or back to Redis; permits Redis did not take back go into their slot
    /// again or into the queue back to Redis; a refused or denied lease did nothing; an
    /// unknown outcome is counted.
    fn settle(&self, op: PendingOp, reply: LeaseReply) {
        match (op.op, reply) {
            (LeaseOp::Take, LeaseReply::Done(d)) if d.allowed => {
                let added = op.from.map_or(0, |(s, epoch)| {
                    let slot = &self.slots[s];
                    let mut keep = lock(&slot.keep);
                    if keep.epoch != epoch || keep.target.is_none() {
                        return 0;
                    }
                    // Relaxed: as in `lease_size`.
                    let added = slot.cell.fill(op.permits, slot.cap.load(Ordering::Relaxed));
                    keep.granted += added;
                    added
                });
                // Relaxed: statistics.
                self.counters.leases.fetch_add(1, Ordering::Relaxed);
                self.count(&self.counters.leased, op.permits);
                self.orphan(&op.target, op.permits - added);
            }
            (LeaseOp::Take, LeaseReply::Done(_) | LeaseReply::NotRun) => {}
            (LeaseOp::Return, LeaseReply::Done(_)) => {
                self.count(&self.counters.returned, op.permits)
            }
            (LeaseOp::Return, LeaseReply::NotRun) => {
                let kept = op.from.map_or(0, |(s, epoch)| {
                    let slot = &self.slots[s];
                    let mut keep = lock(&slot.keep);
                    if keep.epoch != epoch || keep.target.is_none() {
                        return 0;
                    }
                    self.keep_in_hand(slot, &mut keep, op.permits)
                });
                self.orphan(&op.target, op.permits - kept);
            }
            (_, LeaseReply::Unknown) => self.count(&self.counters.unknown, op.permits),
            (_, LeaseReply::Pending(reply)) => {
                // (an outcome is never Pending; kept waiting if it were)
                self.track(op.from, &op.target, op.op, op.permits, reply);
            }
        }
    }

    /// Gives the queued permits back to Redis; what Redis does not take stays queued (at
    /// shutdown: lost).
    fn return_orphans(&self, clock: &PolicyClock, stopping: bool) {
        let orphans = std::mem::take(&mut *lock(&self.orphans));
        for orphan in orphans {
            if !self.give_back(None, &orphan.target, orphan.permits, clock) {
                if stopping {
                    self.count(&self.counters.lost, orphan.permits);
                } else {
                    self.orphan(&orphan.target, orphan.permits);
                }
            }
            // (after what follows from it is accounted, as in `settle_pending`)
            self.unsettle(orphan.permits);
        }
    }

    /// Gives `permits` of `target` back to Redis (taken out of slot `from`, claim epoch,
    /// if they came from one): whether they have left this process's hands. `true` if
    /// Redis took them, or may have (a timed-out call, settled later; an unknown outcome,
    /// counted); `false` if Redis certainly did not (the caller still has them).
    fn give_back(
        &self,
        from: Option<(usize, u64)>,
        target: &TierKey,
        permits: u64,
        clock: &PolicyClock,
    ) -> bool {
        if permits == 0 {
            return true;
        }
        // `permits` ≤ cap, which a tier keeps within u32 (a queued sum saturates).
        let cost = u32::try_from(permits).unwrap_or(u32::MAX);
        let permits = u64::from(cost);
        match self
            .redis
            .lease_op(target, cost, clock.now(), LeaseOp::Return)
        {
            LeaseReply::Done(_) => {
                self.count(&self.counters.returned, permits);
                true
            }
            LeaseReply::NotRun => false,
            LeaseReply::Unknown => {
                self.count(&self.counters.unknown, permits);
                true
            }
            LeaseReply::Pending(reply) => {
                self.track(from, target, LeaseOp::Return, permits, reply);
                true
            }
        }
    }

    /// One slot's work at a tick or an ask: an idle key gives its lease back and frees
    /// the slot; a lease due for review gives back what the key's rate no longer needs; a
    /// slot that ran low (or holds no lease) takes the next one.
    fn tend(&self, s: usize, keep: &mut Keep, clock: &mut PolicyClock) {
        let slot = &self.slots[s];
        let at = Instant::now();
        // Permits handed to the cell and not returned, minus what it holds: spent so far.
        let outstanding = keep.granted - keep.returned;
        let spent = outstanding - slot.cell.permits().min(outstanding);
        if spent != keep.last_spent || keep.active.is_none() {
            keep.last_spent = spent;
            keep.active = Some(at);
        }
        let ttl = self.config.ttl();
        if keep.active.is_some_and(|t| at.duration_since(t) >= ttl) {
            self.retire(s, keep, clock, false);
            return;
        }
        if keep.review_at.is_some_and(|e| at >= e) {
            // Review: keep what one horizon of the local rate needs, return the rest. The
            // permits kept stay spendable throughout (same generation, no round trip).
            let need = self.lease_size(slot, keep, spent, at);
            let excess = slot.cell.trim(need);
            keep.returned += excess;
            if excess > 0 && !self.give_to_redis(s, keep, excess, clock) {
                // Redis cannot take them now: they stay in hand, spendable (the cap held
                // them before the trim).
                let kept = self.keep_in_hand(slot, keep, excess);
                if let Some(target) = &keep.target {
                    self.orphan(target, excess - kept);
                }
            }
            keep.review_at = checked_after(at, ttl);
        }
        // Acquire: pairs with the AcqRel swap of `ask` (and so with the `seen_now` stored
        // before it).
        let asked = slot.asked.load(Ordering::Acquire);
        if !asked && keep.review_at.is_some() {
            return;
        }
        if keep.next_try.is_some_and(|t| at < t) {
            return;
        }
        // Relaxed: ordered after the `asked` load above (see `ask`).
        clock.observe(self.seen_now.load(Ordering::Relaxed));
        self.refill(s, keep, clock, at, spent);
    }

    /// The lease size the key's local rate asks for: the rate since the last lease times
    /// the horizon (the hot rate for a first lease), within 1 and the slot's cap.
    fn lease_size(&self, slot: &Slot, keep: &Keep, spent: u64, at: Instant) -> u64 {
        let horizon = self.config.horizon().as_nanos();
        let want = match keep.mark {
            // The first lease: the key is known to run at the hot rate at least.
            None => u128::from(self.config.hot_rate()).saturating_mul(horizon) / 1_000_000_000,
            Some(mark) => {
                let elapsed = at.duration_since(mark).as_nanos().max(1);
                let used = spent - keep.spent_at_mark.min(spent);
                u128::from(used).saturating_mul(horizon) / elapsed
            }
        };
        // Relaxed: written before the claim's bookkeeping, which the caller has locked.
        let cap = slot.cap.load(Ordering::Relaxed);
        u64::try_from(want).unwrap_or(u64::MAX).clamp(1, cap.max(1))
    }

    /// Takes the next lease for `slot`.
    fn refill(&self, s: usize, keep: &mut Keep, clock: &PolicyClock, at: Instant, spent: u64) {
        let slot = &self.slots[s];
        let Some(target) = keep.target.clone() else {
            return;
        };
        if clock.seen == 0 {
            // No check has told the policy's clock yet (a client time source decides at it).
            return;
        }
        let size = self.lease_size(slot, keep, spent, at);
        // Relaxed: as in `lease_size`.
        let cap = slot.cap.load(Ordering::Relaxed);
        let held = slot.cell.permits();
        let mut want = size.min(cap.saturating_sub(held));
        if want == 0 {
            // Relaxed: served (the slot is full); nothing published with it.
            slot.asked.store(false, Ordering::Relaxed);
            return;
        }
        let now = clock.now();
        let ttl = self.config.ttl();
        for _ in 0..2 {
            // `want` ≤ cap ≤ max_cost, which a tier keeps within u32.
            let cost = u32::try_from(want).unwrap_or(u32::MAX);
            match self.redis.lease_op(&target, cost, now, LeaseOp::Take) {
                LeaseReply::Done(d) if d.allowed => {
                    // Relaxed: the view is advisory; the grant below publishes the
                    // permits (Release).
                    slot.view_remaining.store(d.remaining, Ordering::Relaxed);
                    slot.view_reset_at.store(
                        now.as_u64().saturating_add(d.reset_after.as_u64()),
                        Ordering::Relaxed,
                    );
                    slot.low_water.store(size.div_ceil(2), Ordering::Relaxed);
                    // Checks may have given permits back since `held` was read: what would
                    // lift the slot above its cap goes straight back to Redis.
                    let added = slot.cell.fill(want, cap);
                    if !self.give_back(Some((s, keep.epoch)), &target, want - added, clock) {
                        self.orphan(&target, want - added);
                    }
                    keep.granted += added;
                    if keep.review_at.is_none() {
                        keep.review_at = checked_after(at, ttl);
                    }
                    keep.mark = Some(at);
                    keep.spent_at_mark = spent;
                    keep.next_try = None;
                    // Relaxed: statistics.
                    self.counters.leases.fetch_add(1, Ordering::Relaxed);
                    self.counters.leased.fetch_add(want, Ordering::Relaxed);
                    // Relaxed: served; a spend that asks again after this wakes us again.
                    slot.asked.store(false, Ordering::Relaxed);
                    return;
                }
                LeaseReply::Done(d) if d.remaining > 0 && d.remaining < want => {
                    want = d.remaining;
                }
                LeaseReply::Done(d) => {
                    // Nothing left: ask again when Redis would have some, within a tick
                    // and a TTL.
                    let wait =
                        Duration::from_nanos(d.retry_after.as_u64()).clamp(self.config.tick(), ttl);
                    keep.next_try = checked_after(at, wait);
                    return;
                }
                reply @ (LeaseReply::NotRun | LeaseReply::Unknown | LeaseReply::Pending(_)) => {
                    match reply {
                        // It may still run, or have run: its outcome settles later.
                        LeaseReply::Pending(reply) => {
                            self.track(Some((s, keep.epoch)), &target, LeaseOp::Take, want, reply);
                        }
                        LeaseReply::Unknown => self.count(&self.counters.unknown, want),
                        LeaseReply::NotRun | LeaseReply::Done(_) => {}
                    }
                    let backoff = self.redis.config().retry_backoff().max(self.config.tick());
                    keep.next_try = checked_after(at, backoff);
                    return;
                }
            }
        }
    }

    /// Gives `permits` of slot `s`'s key back to Redis: whether they left this process's
    /// hands (see [`give_back`](Self::give_back)).
    fn give_to_redis(&self, s: usize, keep: &Keep, permits: u64, clock: &PolicyClock) -> bool {
        let Some(target) = keep.target.as_ref() else {
            return false;
        };
        self.give_back(Some((s, keep.epoch)), target, permits, clock)
    }

    /// Returns everything the slot holds to Redis and frees it (an idle key, or the store
    /// dropped). If Redis cannot take the permits back, an idle key keeps holding them
    /// (spendable, tried again after the backoff); only at shutdown are they lost.
    fn retire(&self, s: usize, keep: &mut Keep, clock: &mut PolicyClock, stopping: bool) {
        let slot = &self.slots[s];
        // Relaxed: the last instant a check told (see `ask`).
        clock.observe(self.seen_now.load(Ordering::Relaxed));
        // The owner stays until the permits are back: meanwhile spends find none and go
        // to Redis, and no other key can claim the slot (nor wait on its bookkeeping).
        let left = slot.cell.revoke();
        keep.returned += left;
        if left > 0 && !self.give_to_redis(s, keep, left, clock) {
            if stopping {
                self.count(&self.counters.lost, left);
            } else {
                let kept = self.keep_in_hand(slot, keep, left);
                if let Some(target) = &keep.target {
                    self.orphan(target, left - kept);
                }
                return;
            }
        }
        *keep = Keep::default();
        // Relaxed: nothing is asked of a free slot.
        slot.asked.store(false, Ordering::Relaxed);
        slot.cell.release();
    }

    /// Puts `left` permits Redis could not take back into the slot again (spendable), and
    /// tries again after the backoff: how many went in (the caller queues the rest, see
    /// [`orphan`](Self::orphan)).
    fn keep_in_hand(&self, slot: &Slot, keep: &mut Keep, left: u64) -> u64 {
        // They were in the cell, under the cap, a moment ago; checks may have given some
        // back since.
        // Relaxed: as in `lease_size`.
        let kept = slot.cell.fill(left, slot.cap.load(Ordering::Relaxed));
        keep.returned -= kept;
        let at = Instant::now();
        keep.active = Some(at);
        let backoff = self.redis.config().retry_backoff().max(self.config.tick());
        keep.next_try = checked_after(at, backoff);
        kept
    }

    /// Gives back the permits a check spent from leases before Redis denied (or failed)
    /// another of its tiers; reports those tiers as they now stand. Permits the slot cannot
    /// take back (its lease was revoked since, or it is at its cap again after a refill)
    /// go back to Redis, where they are still counted: queued for the lease thread, which
    /// follows the return to its outcome (the check does not wait for it).
    fn undo(
        &self,
        spent: &[Option<(usize, u32)>],
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) {
        for ((p, taken), outcome) in plan.iter().zip(spent).zip(outcomes.iter_mut()) {
            if let Some((s, generation)) = *taken {
                let slot = &self.slots[s];
                // Relaxed: written at the claim, before the lease the spend came from.
                let cap = slot.cap.load(Ordering::Relaxed);
                if !slot.cell.give_back(generation, u64::from(p.cost), cap) {
                    self.orphan(&self.redis.tier_key(p), u64::from(p.cost));
                    if let Some(keeper) = self.keeper.get() {
                        keeper.unpark();
                    }
                }
                outcome.decision = Inner::view(slot, slot.cell.permits(), now);
            }
        }
    }
}

/// `at + wait`, or (for durations no `Instant` can reach) `None`: never.
fn checked_after(at: Instant, wait: Duration) -> Option<Instant> {
    at.checked_add(wait)
}

/// The lease thread's estimate of the policy's clock: the last `now` a check passed, aged
/// by the time elapsed since it was seen.
#[derive(Debug, Default)]
struct PolicyClock {
    seen: u64,
    at: Option<Instant>,
}

impl PolicyClock {
    fn observe(&mut self, seen: u64) {
        if seen != self.seen || self.at.is_none() {
            self.seen = seen;
            self.at = Some(Instant::now());
        }
    }

    fn now(&self) -> Nanos {
        let elapsed = self.at.map_or(0, |t| {
            u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
        });
        Nanos::new(self.seen.saturating_add(elapsed))
    }
}

impl LeasedStore {
    /// [`Store::check`] made by `io`: the tiers with a lease in hand spend from it; the
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
        // Relaxed: a statistic.
        inner.counters.remote.fetch_add(1, Ordering::Relaxed);
        // Slots past `remote.len()` are never read: any outcome fills them.
        // (Copies of this check's outcomes: they live within the check, while the plan's
        // rule set is held.)
        let mut sub: [TierOutcome; MAX_TIERS] =
            core::array::from_fn(|j| outcomes[remote_of[j.min(remote.len() - 1)]].duplicate());
        inner
            .redis
            .check_io(&remote, now, &mut sub[..remote.len()], io)
            .await;
        for (j, &i) in remote_of[..remote.len()].iter().enumerate() {
            outcomes[i].decision = sub[j].decision;
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

impl Store for LeasedStore {
    fn check(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        finish(self.check_io(plan, now, outcomes, Io::Blocking));
        Ok(())
    }

    /// Goes to Redis (whose answer counts the permits leased by every process as used).
    fn peek(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.inner.redis.peek(plan, now, outcomes)
    }

    /// Goes to Redis: the permits of a locally admitted request were taken there with its
    /// lease.
    fn refund(&self, plan: &Plan<'_>, now: Nanos) {
        self.inner.redis.refund(plan, now);
    }

    /// Goes to Redis.
    fn charge(&self, plan: &Plan<'_>, now: Nanos) {
        self.inner.redis.charge(plan, now);
    }
}

/// The same operations, awaited: a check spends its leases in hand at once and awaits
/// Redis only for the rest (and for a deny's give-back that no lease can take); peeks,
/// refunds and charges await the Redis store's.
impl AsyncStore for LeasedStore {
    async fn check_async(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.check_io(plan, now, outcomes, Io::Async).await;
        Ok(())
    }

    async fn peek_async(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.inner.redis.peek_async(plan, now, outcomes).await
    }

    async fn refund_async(&self, plan: &Plan<'_>, now: Nanos) {
        self.inner.redis.refund_async(plan, now).await
    }

    async fn charge_async(&self, plan: &Plan<'_>, now: Nanos) {
        self.inner.redis.charge_async(plan, now).await
    }
}
