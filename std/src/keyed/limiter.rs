//! [`KeyedLimiter`]: one limit per key, in a table of fixed capacity.

use core::hash::{BuildHasher, Hash};

use tollgate_core::{Algorithm, Clock, Decision, InsufficientCapacity, Nanos, PackedAlgorithm};

use super::key::{mix, word_of};
use super::table::Table;
use super::{DefaultHashBuilder, KeyedError, KeyedLimiterBuilder};
use crate::wait::{until_admitted, Admitted, Jitter};
use crate::MonotonicClock;

/// A rate limiter per key (client id, IP address, API key…), holding at most
/// [`capacity`](Self::capacity) keys in memory allocated once, at construction.
///
/// - **Lookups are lock-free and write nothing but the key's state**: a check hashes the key,
///   reads one or two cache lines, and runs the algorithm's compare-and-swap on the key's
///   8-byte state. A deny is loads only.
/// - **New keys** take the key's shard lock (one of up to 64), and, when the table is full,
///   evict an entry: an idle one if any is at hand (lossless), else per [`WhenFull`]. No
///   background thread, no `retain` calls to remember.
/// - **Memory** is fixed: 19.2 bytes per key of capacity for integer keys (and for any key
///   in [`KeyStorage::Fingerprint`] mode), and at most 256 KiB more where that fills whole
///   2 MiB huge pages; exact mode for other keys (never rounded up) adds one key clone and a
///   4-byte reader count per slot. See the [module docs](crate::keyed) for sizing.
///
/// Keys must be `'static` (owned) and are cloned only when inserted.
///
/// [`WhenFull`]: crate::WhenFull
/// [`KeyStorage::Fingerprint`]: crate::KeyStorage::Fingerprint
///
/// ```
/// use tollgate::{Gcra, KeyedLimiter, ManualClock, Nanos};
///
/// let clock = ManualClock::new();
/// let limiter: KeyedLimiter<String, Gcra, ManualClock> =
///     KeyedLimiter::builder(Gcra::per_second(2).build()?)
///         .capacity(10_000)
///         .clock(clock.clone())
///         .build()?;
/// let alice = String::from("alice");
/// assert!(limiter.check(&alice)?.allowed);
/// assert!(limiter.check(&alice)?.allowed);
/// assert!(!limiter.check(&alice)?.allowed); // alice used her burst
/// assert!(limiter.check(&"bob".to_string())?.allowed); // bob has his own
/// clock.advance(Nanos::from_millis(500));
/// assert!(limiter.check(&alice)?.allowed);
/// assert_eq!(limiter.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyedLimiter<K, A = PackedAlgorithm, C = MonotonicClock, S = DefaultHashBuilder> {
    table: Table<K>,
    algorithm: A,
    clock: C,
    hasher: S,
    word_seed: u64,
}

impl<K, A> KeyedLimiter<K, A, MonotonicClock, DefaultHashBuilder>
where
    K: Hash + Eq + Clone + 'static,
    A: Algorithm,
{
    /// A builder with the defaults: capacity 100 000, [`WhenFull::Evict`](crate::WhenFull),
    /// exact keys, a [`MonotonicClock`], a randomly seeded `foldhash` hasher.
    pub fn builder(algorithm: A) -> KeyedLimiterBuilder<K, A> {
        KeyedLimiterBuilder::new(algorithm)
    }

    /// A limiter for `capacity` keys with the other defaults of
    /// [`builder`](Self::builder).
    ///
    /// ```
    /// use tollgate::{FixedWindow, KeyedLimiter, Nanos};
    /// let limiter: KeyedLimiter<u64, FixedWindow> =
    ///     KeyedLimiter::new(FixedWindow::new(3, Nanos::from_secs(1))?, 1_000)?;
    /// assert_eq!(limiter.check(&42)?.remaining, 2);
    /// assert_eq!(limiter.capacity(), 1_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(
        algorithm: A,
        capacity: usize,
    ) -> Result<KeyedLimiter<K, A>, super::KeyedBuildError> {
        KeyedLimiterBuilder::new(algorithm)
            .capacity(capacity)
            .build()
    }
}

impl<K, A, C, S> KeyedLimiter<K, A, C, S>
where
    K: Hash + Eq + Clone + 'static,
    A: Algorithm,
    C: Clock,
    S: BuildHasher,
{
    /// Assembles a limiter (used by the builder).
    pub(crate) fn from_parts(
        table: Table<K>,
        algorithm: A,
        clock: C,
        hasher: S,
        word_seed: u64,
    ) -> Self {
        KeyedLimiter {
            table,
            algorithm,
            clock,
            hasher,
            word_seed,
        }
    }

    /// The key's 64-bit identity: a seeded bijection for integer keys, else its hash.
    #[inline(always)]
    fn ident(&self, key: &K) -> u64 {
        match word_of(key) {
            Some(word) => mix(word, self.word_seed),
            None => self.hasher.hash_one(key),
        }
    }

    /// Checks one permit for `key` now (one clock read). A new key is inserted.
    ///
    /// Errors only with [`KeyedError::Full`] (new key refused under
    /// [`WhenFull::Refuse`](crate::WhenFull::Refuse)); a deny is `Ok` with
    /// `allowed == false`.
    ///
    /// Always inlined (with the table's lookup): where the caller reads only some fields of
    /// the decision (say `allowed`), the others, and their arithmetic, compile away.
    #[inline(always)]
    pub fn check(&self, key: &K) -> Result<Decision, KeyedError> {
        let h = self.ident(key);
        // Start fetching the key's buckets before the clock read: the (slow) TSC read and
        // the (likely) cache miss then overlap instead of adding up.
        self.table.prefetch(h);
        self.table
            .check(key, h, &self.algorithm, self.clock.now(), 1)
    }

    /// Checks `cost` permits for `key` now, all or nothing.
    ///
    /// ```
    /// use tollgate::{Gcra, KeyedError, KeyedLimiter};
    /// let limiter: KeyedLimiter<u32, Gcra> =
    ///     KeyedLimiter::new(Gcra::per_second(10).burst(4).build()?, 100)?;
    /// assert_eq!(limiter.check_n(&1, 3)?.remaining, 1);
    /// assert!(matches!(limiter.check_n(&1, 5), Err(KeyedError::InsufficientCapacity(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline(always)]
    pub fn check_n(&self, key: &K, cost: u32) -> Result<Decision, KeyedError> {
        let h = self.ident(key);
        // As in `check`: the bucket loads overlap the clock read.
        self.table.prefetch(h);
        self.table
            .check(key, h, &self.algorithm, self.clock.now(), cost)
    }

    /// Waits until one permit for `key` is admitted and returns the admitting decision
    /// (governor's `until_key_ready`).
    ///
    /// Checks now; if denied, sleeps until the decision's `retry_after` and checks again. An
    /// admission with a `delay` (a [`LeakyBucket`](crate::LeakyBucket)'s queue) resolves
    /// once that delay has passed. Needs no particular runtime: it sleeps on
    /// [`Delay`](crate::wait::Delay), a timer thread of tollgate's own. Dropping the
    /// future while it backs off consumes nothing.
    ///
    /// A [`KeyedError::Full`] (a new key refused under
    /// [`WhenFull::Refuse`](crate::WhenFull::Refuse)) is returned at once, not waited out:
    /// nothing says when room will appear.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{Gcra, KeyedLimiter};
    ///
    /// let limiter: KeyedLimiter<u64, Gcra> =
    ///     KeyedLimiter::new(Gcra::per_second(100).burst(1).build()?, 1_000)?;
    /// assert!(limiter.check(&7)?.allowed);
    /// assert!(!limiter.check(&7)?.allowed); // key 7's next permit is 10 ms away
    ///
    /// // Any executor will do; here a current-thread tokio runtime.
    /// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// let start = Instant::now();
    /// assert!(runtime.block_on(limiter.until_key_ready(&8))?.allowed); // at once
    /// assert!(runtime.block_on(limiter.until_key_ready(&7))?.allowed);
    /// assert!(start.elapsed() >= Duration::from_millis(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn until_key_ready(&self, key: &K) -> Result<Admitted, KeyedError> {
        until_admitted(|| self.check(key)).await.map(Admitted)
    }

    /// [`until_key_ready`](Self::until_key_ready) with `jitter` added to each backoff, so
    /// callers denied together come back spread out (governor's
    /// `until_key_ready_with_jitter`).
    pub async fn until_key_ready_with_jitter(
        &self,
        key: &K,
        jitter: Jitter,
    ) -> Result<Admitted, KeyedError> {
        until_admitted(|| self.check(key))
            .with_jitter(jitter)
            .await
            .map(Admitted)
    }

    /// Waits until `cost` permits for `key` are admitted at once, as
    /// [`until_key_ready`](Self::until_key_ready);
    /// [`KeyedError::InsufficientCapacity`] at once if `cost` can never be admitted.
    ///
    /// ```
    /// use tollgate::{Gcra, KeyedError, KeyedLimiter};
    ///
    /// let limiter: KeyedLimiter<u64, Gcra> =
    ///     KeyedLimiter::new(Gcra::per_second(100).burst(4).build()?, 1_000)?;
    /// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// runtime.block_on(async {
    ///     assert_eq!(limiter.until_key_n_ready(&1, 4).await?.remaining, 0);
    ///     assert!(limiter.until_key_n_ready(&1, 2).await?.allowed); // after about 20 ms
    ///     assert!(matches!(
    ///         limiter.until_key_n_ready(&1, 5).await,
    ///         Err(KeyedError::InsufficientCapacity(_))
    ///     ));
    ///     Ok::<_, KeyedError>(())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn until_key_n_ready(&self, key: &K, cost: u32) -> Result<Admitted, KeyedError> {
        until_admitted(|| self.check_n(key, cost))
            .await
            .map(Admitted)
    }

    /// What a one-permit check of `key` would answer now; consumes nothing and never
    /// inserts (an absent key answers as a fresh one, or, with a
    /// [debt summary](crate::KeyedLimiterBuilder::debt_summary), from the debt its first
    /// check would start from).
    #[inline]
    pub fn peek(&self, key: &K) -> Decision {
        self.peek_at(key, self.clock.now())
    }

    /// Checks one permit for `key` at `now`.
    #[inline]
    pub fn check_at(&self, key: &K, now: Nanos) -> Result<Decision, KeyedError> {
        self.check_n_at(key, now, 1)
    }

    /// Checks `cost` permits for `key` at `now`, all or nothing.
    #[inline]
    pub fn check_n_at(&self, key: &K, now: Nanos, cost: u32) -> Result<Decision, KeyedError> {
        self.table
            .check(key, self.ident(key), &self.algorithm, now, cost)
    }

    /// What a one-permit check of `key` at `now` would answer; consumes nothing, inserts
    /// nothing.
    ///
    /// ```
    /// use tollgate::{Gcra, KeyedLimiter, Nanos};
    /// let limiter: KeyedLimiter<u64, Gcra> =
    ///     KeyedLimiter::new(Gcra::per_second(1).burst(3).build()?, 100)?;
    /// assert_eq!(limiter.peek_at(&9, Nanos::ZERO).remaining, 2);
    /// assert!(!limiter.contains(&9));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn peek_at(&self, key: &K, now: Nanos) -> Decision {
        match self.peek_n_at(key, now, 1) {
            Ok(decision) => decision,
            // A cost of one is within every validated configuration.
            Err(_) => Decision::deny(self.algorithm.limit(), 0, Nanos::MAX, Nanos::MAX),
        }
    }

    /// What a check of `cost` permits for `key` at `now` would answer.
    #[inline]
    pub fn peek_n_at(
        &self,
        key: &K,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        self.table
            .peek(key, self.ident(key), &self.algorithm, now, cost)
    }

    /// Whether `key` currently has an entry.
    pub fn contains(&self, key: &K) -> bool {
        self.table.contains(key, self.ident(key))
    }

    /// Forgets `key`: its next check starts with full quota. Whether it had an entry.
    pub fn remove(&self, key: &K) -> bool {
        self.table.remove(key, self.ident(key))
    }

    /// Evicts every entry whose state is idle at `now` (equal to a fresh key's), taking each
    /// shard's lock in turn; returns how many. Never needed for correctness or to bound
    /// memory (inserts evict on their own); useful to make `len()` reflect live keys.
    ///
    /// ```
    /// use tollgate::{Gcra, KeyedLimiter, Nanos};
    /// let limiter: KeyedLimiter<u64, Gcra> =
    ///     KeyedLimiter::new(Gcra::per_second(10).build()?, 100)?;
    /// limiter.check_at(&1, Nanos::ZERO)?;
    /// assert_eq!(limiter.evict_idle_at(Nanos::ZERO), 0); // key 1 used a permit
    /// assert_eq!(limiter.evict_idle_at(Nanos::from_secs(1)), 1); // fully refilled
    /// assert!(limiter.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn evict_idle_at(&self, now: Nanos) -> usize {
        self.table.evict_idle_all(&self.algorithm, now)
    }

    /// Keys resident now (at most [`capacity`](Self::capacity) when no insert is in
    /// flight).
    ///
    /// A sum of per-shard counts read one after another: while inserts run in other
    /// threads it is a snapshot that may be off by the inserts and evictions that ran
    /// during the read (a unit of quota moving between two shards through the shared pool
    /// can be counted in both, or in neither). The bound itself, enforced under the shard
    /// locks with an exact shared counter, always holds.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key is resident.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys ever resident at once, fixed at construction.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Bytes this limiter holds (the limiter value and its one-time allocations), constant
    /// from construction on. Heap memory owned by stored keys themselves (a `String`'s
    /// bytes in exact mode) comes on top.
    ///
    /// ```
    /// use tollgate::{Gcra, KeyedLimiter};
    /// let limiter: KeyedLimiter<u64, Gcra> =
    ///     KeyedLimiter::new(Gcra::per_second(10).build()?, 50_000)?;
    /// assert!(limiter.memory_bytes() <= 20 * 50_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes() - core::mem::size_of::<Table<K>>() + core::mem::size_of::<Self>()
    }

    /// Occupancy and eviction counters.
    pub fn stats(&self) -> KeyedStats {
        self.table.stats()
    }

    /// Number of shards (insert locks).
    pub fn shards(&self) -> usize {
        self.table.shard_count()
    }

    /// Number of slots (1.2 per key of capacity, rounded up to whole buckets).
    pub fn slots(&self) -> usize {
        self.table.slot_count()
    }

    /// The algorithm's parameters.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The hasher of non-integer keys.
    pub fn hasher(&self) -> &S {
        &self.hasher
    }
    /// Switches a protocol step off (loom broken twins only; `--cfg tollgate_loom`).
    #[cfg(tollgate_loom)]
    #[doc(hidden)]
    pub fn loom_inject(&mut self, fault: super::LoomFault) {
        self.table.inject(fault);
    }

    /// `key`'s state if resident, read the way the policy layer reads, compensates and
    /// refunds (`Table::update_resident`: a lock-free probe, no insert), for the loom models
    /// (`--cfg tollgate_loom` only; integer keys or fingerprints).
    #[cfg(tollgate_loom)]
    #[doc(hidden)]
    pub fn loom_resident_state(&self, key: &K) -> Option<u64> {
        self.table
            .update_resident(self.ident(key), |state| (None, state))
    }

    /// The key quota's parts: each shard's `(len, base)` and the shared pool's spare units,
    /// so a loom model can check that the quota is conserved, `Σ max(len, base) + spare =
    /// capacity` (`--cfg tollgate_loom` only; read it with no thread inserting).
    #[cfg(tollgate_loom)]
    #[doc(hidden)]
    pub fn loom_quota(&self) -> (Vec<(usize, usize)>, usize) {
        self.table.quota_parts()
    }

    /// The shard and the two candidate buckets (indices within the shard) of `key`, so a
    /// loom model can pick keys that collide (`--cfg tollgate_loom` only).
    #[cfg(tollgate_loom)]
    #[doc(hidden)]
    pub fn loom_buckets(&self, key: &K) -> (usize, [usize; 2]) {
        self.table.buckets_of(self.ident(key))
    }
}

/// A snapshot of a keyed limiter's occupancy and eviction counters (each read with a
/// relaxed load, so a snapshot taken under traffic is approximate but never torn per field).
///
/// ```
/// use tollgate::{Gcra, KeyedLimiter, Nanos};
/// let limiter: KeyedLimiter<u64, Gcra> =
///     KeyedLimiter::new(Gcra::per_second(1).build().unwrap(), 1000).unwrap();
/// limiter.check_at(&7, Nanos::ZERO).unwrap();
/// let stats = limiter.stats();
/// assert_eq!((stats.len, stats.inserts, stats.pressure_evictions), (1, 1, 0));
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct KeyedStats {
    /// Keys resident now.
    pub len: usize,
    /// The most keys the table will ever hold.
    pub capacity: usize,
    /// New keys inserted since construction.
    pub inserts: u64,
    /// Entries evicted because their state was idle (equal to a fresh key's): lossless.
    pub idle_evictions: u64,
    /// Entries evicted under pressure ([`WhenFull::Evict`](crate::WhenFull::Evict)) while
    /// still holding limiting state: the key starts fresh if it comes back, unless the
    /// limiter keeps a [debt summary](crate::KeyedLimiterBuilder::debt_summary).
    pub pressure_evictions: u64,
    /// New keys refused ([`WhenFull::Refuse`](crate::WhenFull::Refuse)).
    pub refusals: u64,
    /// Keys removed by [`KeyedLimiter::remove`](crate::KeyedLimiter::remove).
    pub removals: u64,
}
