//! [`KeyedLimiterBuilder`]: configures and sizes a [`KeyedLimiter`].

use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;

use tollgate_core::{Algorithm, Clock};

use super::geometry::Geometry;
use super::key_ident::is_word;
use super::table::{Mode, Table};
use super::{DefaultHashBuilder, KeyStorage, KeyedBuildError, KeyedLimiter, WhenFull};
use crate::MonotonicClock;

/// The capacity a builder uses unless told otherwise.
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
            _key: PhantomData,
        }
    }
}

impl<K, A, C, S> KeyedLimiterBuilder<K, A, C, S> {
    /// The most keys resident at once (default 100 000). Memory is allocated for exactly
    /// this many at [`build`](Self::build) and never grows.
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
        let table = Table::new(geometry, mode, self.when_full, mask_seed);
        Ok(KeyedLimiter::from_parts(
            table,
            self.algorithm,
            self.clock,
            self.hasher,
            word_seed,
        ))
    }
}
