//! [`KeyedLimiterBuilder`]: configures and sizes a [`KeyedLimiter`].

use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;

use tollgate_core::{Algorithm, Clock};

use super::debt_summary::MAX_DEBTS;
use super::key::is_word;
use super::table::Geometry;
use super::table::{Mode, Table};
use super::{KeyStorage, KeyedBuildError, KeyedLimiter, WhenFull};
use crate::MonotonicClock;

/// The default hasher of non-integer keys: `foldhash`'s fast hasher, randomly seeded per
/// limiter (so collisions and bucket choices cannot be predicted from outside).
pub type DefaultHashBuilder = foldhash::fast::RandomState;

/// The keys a table keeps state for unless told otherwise: a [`KeyedLimiterBuilder`]'s
/// capacity, and each tier's in a policy whose rules set no `capacity`.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// Configures a [`KeyedLimiter`]; start from [`KeyedLimiter::builder`].
///
/// ```
/// use tollgate::{Gcra, KeyStorage, KeyedLimiter, ManualClock, WhenFull};
/// let limiter: KeyedLimiter<Vec<u8>, Gcra, ManualClock> =
///     KeyedLimiter::builder(Gcra::per_second(100).burst(20).build()?)
///         .capacity(50_000)
///         .when_full(WhenFull::Refuse)
///         .key_storage(KeyStorage::Fingerprint)
///         .clock(ManualClock::new())
///         .build()?;
/// assert_eq!(limiter.capacity(), 50_000);
/// assert!(limiter.memory_bytes() <= 20 * 50_000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "call .build() to create the limiter"]
pub struct KeyedLimiterBuilder<K, A, C = MonotonicClock, S = DefaultHashBuilder> {
    algorithm: A,
    clock: C,
    hasher: S,
    capacity: usize,
    shards: Option<usize>,
    when_full: WhenFull,
    storage: KeyStorage,
    summary_debts: usize,
    _key: PhantomData<fn() -> K>,
}

impl<K, A> KeyedLimiterBuilder<K, A> {
    /// A builder with the defaults (see [`KeyedLimiter::builder`]).
    pub fn new(algorithm: A) -> KeyedLimiterBuilder<K, A> {
        KeyedLimiterBuilder {
            algorithm,
            clock: MonotonicClock::new(),
            hasher: DefaultHashBuilder::default(),
            capacity: DEFAULT_CAPACITY,
            shards: None,
            when_full: WhenFull::Evict,
            storage: KeyStorage::Exact,
            summary_debts: 0,
            _key: PhantomData,
        }
    }
}

impl<K, A, C, S> KeyedLimiterBuilder<K, A, C, S> {
    /// The most keys resident at once (default 100 000, at most 2³² − 1 and what the
    /// address space holds: [`KeyedBuildError::CapacityTooLarge`] beyond). Memory is
    /// allocated for exactly this many at [`build`](Self::build) and never grows.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Number of shards, i.e. insert locks (rounded down to a power of two, at most 1024
    /// and at most the capacity). Default: one per 1024 keys of capacity, 1 to 64. Lookups
    /// of resident keys take no lock, so this only matters for insert-heavy traffic.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// What to do with a new key when there is no room (default [`WhenFull::Evict`]).
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// Whether non-integer keys are stored exactly or as 64-bit fingerprints (default
    /// [`KeyStorage::Exact`]). Integer keys are always exact in 8 bytes.
    pub fn key_storage(mut self, storage: KeyStorage) -> Self {
        self.storage = storage;
        self
    }

    /// Keeps the debt of entries evicted under pressure in a summary sized for `debts`
    /// debts (keys evicted under pressure within one reset horizon), so that eviction
    /// cannot launder a limit (default `0`: off). Opt-in: it costs about 12 bytes per debt
    /// (`8 × 2⌈debts/2⌉ + 128 × ⌈debts/32⌉`) plus one bit per slot (all in
    /// [`KeyedLimiter::memory_bytes`](crate::KeyedLimiter::memory_bytes), allocated by
    /// [`build`](Self::build) and fixed), and new keys may start with *phantom* debt after
    /// a flood of evictions.
    ///
    /// Without it, [`WhenFull::Evict`] forgets an evicted entry: a client whose entry a
    /// flood of other keys pushes out comes back with a full allowance (as in nginx's
    /// `limit_req`, Envoy's or HAProxy's tables). With it, an entry evicted while it owes
    /// permits leaves its debt in two rows of `⌈debts / 2⌉` value cells (a count-min
    /// sketch whose "add" is a max over states) and marks its identity in a split-block
    /// Bloom filter (two generations of 16 bits per debt; a generation is cleared only once
    /// every debt marked in it has ended). A new key starts from the stricter of a fresh
    /// state and, if a live generation marks it, what its two value cells hold (peeks of
    /// absent keys answer from the same state). A check of a resident key never touches
    /// the summary.
    ///
    /// **Rule** (no cascade): an entry that started fresh records its whole state; one that
    /// started from an inherited debt records only the debt above what the summary already
    /// gives it. Inherited debt is never recorded again as the key's own.
    ///
    /// **Bounds**, for `D` keys evicted with debt whose debt has not ended yet (the
    /// pressure evictions of one reset horizon: GCRA's burst tolerance, one window, two for
    /// a sliding counter):
    ///
    /// - a key never evicted starts with phantom debt only if a live generation marks it
    ///   and both its value cells hold a debt: with probability at most about 0.1 % per
    ///   generation filled to `debts` (`E[(1 − (63/64)^J)^8]`, `J` Poisson of mean 32), so
    ///   about 0.2 % while `D ≤ 2 × debts` (measured 0.13–0.18 % at `D = 2 × debts`, every
    ///   evicted key having spent its whole limit); the phantom debt is at most the largest
    ///   debt that one evicted key took itself (decayed since), and ends when that debt
    ///   would have;
    /// - a key evicted with only its own debt comes back with at least that debt: over any
    ///   window it is admitted no more than had it never been evicted, whatever the flood
    ///   size. A key evicted *again* after it came back with an inherited debt comes back
    ///   with at least the larger of the summary's estimate and what it took since, not
    ///   their sum (at most that much regained per such eviction, and only if least-loss
    ///   eviction picks it again, i.e. everything in view owes as much).
    ///
    /// Sizing: `debts` = the pressure evictions you expect per reset horizon, halved (two
    /// generations hold twice it at the stated rate); `debts = capacity` covers a flood of
    /// twice the capacity per horizon. Beyond `2 × debts` the current generation overfills
    /// and the phantom rate rises towards the value rows' `(1 − e^(−D/w))²` (`w` cells per
    /// row): a flood of many times the size of keys that each used their limit leaves new
    /// keys limited until those debts end (fail closed, as [`WhenFull::Refuse`] would),
    /// never launders. With [`WhenFull::Refuse`] nothing is evicted under pressure and no
    /// summary is allocated.
    ///
    /// ```
    /// use tollgate::{Gcra, KeyedLimiter, Nanos};
    /// let limiter: KeyedLimiter<u64, Gcra> =
    ///     KeyedLimiter::builder(Gcra::per_second(1).burst(3).build()?)
    ///         .capacity(4)
    ///         .shards(1)
    ///         .debt_summary(64)
    ///         .build()?;
    /// let now = Nanos::from_secs(1);
    /// for _ in 0..3 {
    ///     assert!(limiter.check_at(&7, now)?.allowed);
    /// }
    /// // Key 7 is spent; a flood of other keys, each spending its burst, pushes it out.
    /// for key in 100..120 {
    ///     for _ in 0..3 {
    ///         limiter.check_at(&key, now)?;
    ///     }
    /// }
    /// assert!(!limiter.contains(&7));
    /// // It comes back with its debt, not a fresh burst.
    /// assert!(!limiter.check_at(&7, now)?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn debt_summary(mut self, debts: usize) -> Self {
        self.summary_debts = debts;
        self
    }

    /// Reads time from `clock` instead.
    pub fn clock<C2>(self, clock: C2) -> KeyedLimiterBuilder<K, A, C2, S> {
        KeyedLimiterBuilder {
            algorithm: self.algorithm,
            clock,
            hasher: self.hasher,
            capacity: self.capacity,
            shards: self.shards,
            when_full: self.when_full,
            storage: self.storage,
            summary_debts: self.summary_debts,
            _key: PhantomData,
        }
    }

    /// Hashes keys with `hasher` instead (it also seeds the integer-key bijection and the
    /// state masks, so a fixed-seed hasher makes the table's layout reproducible).
    pub fn hasher<S2>(self, hasher: S2) -> KeyedLimiterBuilder<K, A, C, S2> {
        KeyedLimiterBuilder {
            algorithm: self.algorithm,
            clock: self.clock,
            hasher,
            capacity: self.capacity,
            shards: self.shards,
            when_full: self.when_full,
            storage: self.storage,
            summary_debts: self.summary_debts,
            _key: PhantomData,
        }
    }
}

impl<K, A, C, S> KeyedLimiterBuilder<K, A, C, S>
where
    K: Hash + Eq + Clone + 'static,
    A: Algorithm,
    C: Clock,
    S: BuildHasher,
{
    /// Validates the capacity and allocates the table (the only allocation the limiter
    /// ever makes, apart from cloning keys in exact mode).
    pub fn build(self) -> Result<KeyedLimiter<K, A, C, S>, KeyedBuildError> {
        let geometry = Geometry::new(self.capacity, self.shards)?;
        let mode = if is_word::<K>() {
            Mode::Word
        } else {
            match self.storage {
                KeyStorage::Exact => Mode::Exact,
                KeyStorage::Fingerprint => Mode::Fingerprint,
            }
        };
        let word_seed = self.hasher.hash_one(0x243f_6a88_85a3_08d3u64);
        let mask_seed = self.hasher.hash_one(0x1319_8a2e_0370_7344u64);
        if self.summary_debts > MAX_DEBTS {
            return Err(KeyedBuildError::DebtSummaryTooLarge { max: MAX_DEBTS });
        }
        // Exact keys' cells are per slot too: only the other tables grow into huge pages.
        let geometry = match mode {
            Mode::Word | Mode::Fingerprint => geometry.in_huge_pages(),
            Mode::Exact => geometry,
        };
        let mut table = Table::new(geometry, mode, self.when_full, mask_seed);
        if self.summary_debts > 0 && self.when_full == WhenFull::Evict {
            table.enable_debt_summary(self.summary_debts);
        }
        Ok(KeyedLimiter::from_parts(
            table,
            self.algorithm,
            self.clock,
            self.hasher,
            word_seed,
        ))
    }
}
