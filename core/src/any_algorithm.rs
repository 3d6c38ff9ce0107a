//! Algorithms as values: [`AlgorithmConfig`] (the seed's factory: the algorithm is a config
//! value), [`PackedAlgorithm`] and [`AnyAlgorithm`] (validated, dispatched by `match`, never
//! `Box<dyn>`), and [`AnyLimiter`], a direct limiter for whichever was configured.

use crate::{
    Algorithm, Clock, ConfigError, Decision, FixedWindow, Gcra, InsufficientCapacity, LeakyBucket,
    LogRing, Nanos, Outcome, SlidingWindowCounter, SlidingWindowLog, StateCell, TokenBucket,
};

/// Which algorithm, with its numbers: a plain description, validated by [`build`](Self::build).
///
/// ```
/// use tollgate_core::{AlgorithmConfig, AnyLimiter, Nanos};
/// let config = AlgorithmConfig::FixedWindow { limit: 2, window: Nanos::from_secs(60) };
/// let limiter = AnyLimiter::<0>::new(config.build().unwrap()).unwrap();
/// assert!(limiter.check_at(Nanos::ZERO).allowed);
/// assert_eq!(limiter.check_at(Nanos::ZERO).remaining, 0);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AlgorithmConfig {
    /// [`Gcra`]: `limit` per `period`, up to `burst` at once.
    Gcra {
        /// Permits per period.
        limit: u64,
        /// The period.
        period: Nanos,
        /// The most admitted at once.
        burst: u64,
    },
    /// [`TokenBucket`]: `capacity` tokens, `refill_amount` back every `refill_period`.
    TokenBucket {
        /// Bucket capacity.
        capacity: u64,
        /// Tokens regained per refill period.
        refill_amount: u64,
        /// The refill period.
        refill_period: Nanos,
    },
    /// [`LeakyBucket`]: drains `amount` per `period`, `queue` may wait.
    LeakyBucket {
        /// Units drained per period.
        amount: u64,
        /// The period.
        period: Nanos,
        /// Queue depth.
        queue: u64,
    },
    /// [`FixedWindow`]: `limit` per `window`.
    FixedWindow {
        /// Permits per window.
        limit: u64,
        /// Window length.
        window: Nanos,
    },
    /// [`SlidingWindowCounter`]: `limit` per sliding `window`, approximated.
    SlidingWindowCounter {
        /// Permits per window.
        limit: u64,
        /// Window length.
        window: Nanos,
    },
    /// [`SlidingWindowLog`]: `limit` per sliding `window`, exact.
    SlidingWindowLog {
        /// Permits per window.
        limit: u64,
        /// Window length.
        window: Nanos,
    },
}

/// `⌊value · parts / whole⌋`, at least `min`, at most `value` (`min` when `value` is).
const fn share_of(value: u64, parts: u64, whole: u64, min: u64) -> u64 {
    let scaled = if whole == 0 {
        value as u128
    } else {
        value as u128 * parts as u128 / whole as u128
    };
    // Truncation: in the `else` branch `scaled ≤ value`, a u64. (A const fn: no `try_from`.)
    #[allow(clippy::cast_possible_truncation)]
    let scaled = if scaled > value as u128 {
        value
    } else {
        scaled as u64
    };
    if scaled < min {
        min
    } else {
        scaled
    }
}

impl AlgorithmConfig {
    /// The same rule with `parts / whole` of its allowance: what one of several processes
    /// may admit on its own (e.g. a fleet's in-process fallback while the shared store is
    /// down). Every amount that admits (limit, burst, capacity, refill amount, drain amount)
    /// is scaled down, rounding down but never below 1; a leaky bucket's queue may reach 0;
    /// periods and windows are kept. A share above 1 keeps the rule as it is.
    ///
    /// ```
    /// use tollgate_core::{AlgorithmConfig, Nanos};
    /// let rule = AlgorithmConfig::Gcra { limit: 100, period: Nanos::from_secs(1), burst: 10 };
    /// assert_eq!(
    ///     rule.share(1, 4),
    ///     AlgorithmConfig::Gcra { limit: 25, period: Nanos::from_secs(1), burst: 2 }
    /// );
    /// ```
    pub const fn share(&self, parts: u64, whole: u64) -> AlgorithmConfig {
        match *self {
            AlgorithmConfig::Gcra {
                limit,
                period,
                burst,
            } => AlgorithmConfig::Gcra {
                limit: share_of(limit, parts, whole, 1),
                period,
                burst: share_of(burst, parts, whole, 1),
            },
            AlgorithmConfig::TokenBucket {
                capacity,
                refill_amount,
                refill_period,
            } => AlgorithmConfig::TokenBucket {
                capacity: share_of(capacity, parts, whole, 1),
                refill_amount: share_of(refill_amount, parts, whole, 1),
                refill_period,
            },
            AlgorithmConfig::LeakyBucket {
                amount,
                period,
                queue,
            } => AlgorithmConfig::LeakyBucket {
                amount: share_of(amount, parts, whole, 1),
                period,
                queue: share_of(queue, parts, whole, 0),
            },
            AlgorithmConfig::FixedWindow { limit, window } => AlgorithmConfig::FixedWindow {
                limit: share_of(limit, parts, whole, 1),
                window,
            },
            AlgorithmConfig::SlidingWindowCounter { limit, window } => {
                AlgorithmConfig::SlidingWindowCounter {
                    limit: share_of(limit, parts, whole, 1),
                    window,
                }
            }
            AlgorithmConfig::SlidingWindowLog { limit, window } => {
                AlgorithmConfig::SlidingWindowLog {
                    limit: share_of(limit, parts, whole, 1),
                    window,
                }
            }
        }
    }

    /// Validates the numbers into an executable algorithm, with the errors of each
    /// algorithm's own constructor. Every config that builds admits a fresh key's whole
    /// limit at any `now` up to [`Nanos::MAX_NOW`]: a bucket whose horizon is longer than
    /// [`Nanos::MAX_HORIZON`] is refused ([`ConfigError::PeriodTooLong`],
    /// [`ConfigError::LimitTooLarge`]), and the window algorithms need no horizon.
    ///
    /// ```
    /// use tollgate_core::{AlgorithmConfig, ConfigError, Nanos};
    /// let day = 86_400_000_000_000;
    /// let ages = AlgorithmConfig::Gcra { limit: 1, period: Nanos::new(200_000 * day), burst: 1 };
    /// assert_eq!(ages.build(), Err(ConfigError::PeriodTooLong { max: Nanos::MAX_HORIZON }));
    /// let window = AlgorithmConfig::FixedWindow { limit: 1, window: Nanos::new(200_000 * day) };
    /// assert!(window.build().is_ok());
    /// ```
    pub const fn build(&self) -> Result<AnyAlgorithm, ConfigError> {
        let packed = match *self {
            AlgorithmConfig::Gcra {
                limit,
                period,
                burst,
            } => match Gcra::with_period(limit, period).burst(burst).build() {
                Ok(a) => PackedAlgorithm::Gcra(a),
                Err(e) => return Err(e),
            },
            AlgorithmConfig::TokenBucket {
                capacity,
                refill_amount,
                refill_period,
            } => match TokenBucket::new(capacity, refill_amount, refill_period) {
                Ok(a) => PackedAlgorithm::TokenBucket(a),
                Err(e) => return Err(e),
            },
            AlgorithmConfig::LeakyBucket {
                amount,
                period,
                queue,
            } => match LeakyBucket::new(amount, period, queue) {
                Ok(a) => PackedAlgorithm::LeakyBucket(a),
                Err(e) => return Err(e),
            },
            AlgorithmConfig::FixedWindow { limit, window } => match FixedWindow::new(limit, window)
            {
                Ok(a) => PackedAlgorithm::FixedWindow(a),
                Err(e) => return Err(e),
            },
            AlgorithmConfig::SlidingWindowCounter { limit, window } => {
                match SlidingWindowCounter::new(limit, window) {
                    Ok(a) => PackedAlgorithm::SlidingWindowCounter(a),
                    Err(e) => return Err(e),
                }
            }
            AlgorithmConfig::SlidingWindowLog { limit, window } => {
                return match SlidingWindowLog::new(limit, window) {
                    Ok(a) => Ok(AnyAlgorithm::Log(a)),
                    Err(e) => Err(e),
                }
            }
        };
        Ok(AnyAlgorithm::Packed(packed))
    }
}

/// Any of the five single-word algorithms, dispatched by `match`. Implements
/// [`Algorithm`], so keyed tables can hold a runtime-chosen algorithm at 8 bytes per key.
///
/// ```
/// use tollgate_core::{Algorithm, Gcra, PackedAlgorithm};
/// let any = PackedAlgorithm::from(Gcra::per_second(5).build().unwrap());
/// assert_eq!(any.limit(), 5);
/// ```
///
/// Deliberately *not* `#[non_exhaustive]` (unlike [`AlgorithmConfig`], which callers only
/// build): the few places that must know each algorithm by name, such as the Redis
/// backend's Lua encoding, match on it exhaustively, with no `_ =>` arm, so that adding
/// an algorithm fails to compile until every one of them handles it. A match that forgets
/// one is an error:
///
/// ```compile_fail,E0004
/// use tollgate_core::PackedAlgorithm;
/// fn script_name(a: &PackedAlgorithm) -> &'static str {
///     match a {
///         PackedAlgorithm::Gcra(_) | PackedAlgorithm::TokenBucket(_) => "gcra",
///         PackedAlgorithm::LeakyBucket(_) => "leaky",
///         PackedAlgorithm::FixedWindow(_) => "fixed",
///         // no arm for SlidingWindowCounter
///     }
/// }
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PackedAlgorithm {
    /// GCRA.
    Gcra(Gcra),
    /// Token bucket.
    TokenBucket(TokenBucket),
    /// Leaky bucket (shaper).
    LeakyBucket(LeakyBucket),
    /// Fixed window.
    FixedWindow(FixedWindow),
    /// Sliding window counter.
    SlidingWindowCounter(SlidingWindowCounter),
}

macro_rules! dispatch {
    ($self:expr, $a:ident => $body:expr) => {
        match $self {
            PackedAlgorithm::Gcra($a) => $body,
            PackedAlgorithm::TokenBucket($a) => $body,
            PackedAlgorithm::LeakyBucket($a) => $body,
            PackedAlgorithm::FixedWindow($a) => $body,
            PackedAlgorithm::SlidingWindowCounter($a) => $body,
        }
    };
}

impl Algorithm for PackedAlgorithm {
    #[inline]
    fn limit(&self) -> u64 {
        dispatch!(self, a => a.limit())
    }

    #[inline]
    fn max_cost(&self) -> u64 {
        dispatch!(self, a => a.max_cost())
    }

    #[inline]
    fn decide(&self, state: u64, now: Nanos, cost: u32) -> Result<Outcome, InsufficientCapacity> {
        dispatch!(self, a => a.decide(state, now, cost))
    }

    #[inline]
    fn is_idle(&self, state: u64, now: Nanos) -> bool {
        dispatch!(self, a => a.is_idle(state, now))
    }

    #[inline]
    fn undo(&self, state: u64, before: u64, after: u64, cost: u32) -> u64 {
        dispatch!(self, a => a.undo(state, before, after, cost))
    }

    #[inline]
    fn refund(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        dispatch!(self, a => a.refund(state, now, cost))
    }

    #[inline]
    fn charge(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        dispatch!(self, a => a.charge(state, now, cost))
    }

    #[inline]
    fn used(&self, state: u64, now: Nanos) -> u64 {
        dispatch!(self, a => a.used(state, now))
    }

    #[inline]
    fn with_used(&self, now: Nanos, used: u64) -> u64 {
        dispatch!(self, a => a.with_used(now, used))
    }
}

/// How a packed state is read, for conversions between algorithms.
enum Shape<'a> {
    /// A time running `interval` ns ahead per permit (GCRA, token bucket, leaky bucket).
    Tat { interval: u64 },
    /// A fixed window's index and count.
    Fixed(&'a FixedWindow),
    /// A sliding counter's index and two counts.
    Counter(&'a SlidingWindowCounter),
}

impl PackedAlgorithm {
    fn shape(&self) -> Shape<'_> {
        let tat = |interval: Nanos| Shape::Tat {
            interval: interval.as_u64(),
        };
        match self {
            PackedAlgorithm::Gcra(g) => tat(g.emission_interval()),
            PackedAlgorithm::TokenBucket(t) => tat(t.refill_interval()),
            PackedAlgorithm::LeakyBucket(l) => tat(l.drain_interval()),
            PackedAlgorithm::FixedWindow(w) => Shape::Fixed(w),
            PackedAlgorithm::SlidingWindowCounter(w) => Shape::Counter(w),
        }
    }

    /// Moves `state`, written under `from`, to these parameters at `now`: what a reload or
    /// a rolling deploy does to a live key. Never an error, and the result never admits
    /// more on top of what the key had already used than these parameters allow.
    ///
    /// The rule is "carry exactly the permits used", rounded toward the stricter side,
    /// never capped below what was used:
    ///
    /// | from → to | what is kept |
    /// |---|---|
    /// | same parameters | the state, unchanged |
    /// | GCRA / token bucket / leaky bucket → any of the three | the debt in permits, fractions included (`(TAT − now)·T_new / T_old`, rounded up to the ns), not capped |
    /// | fixed window → fixed window, same window | the state as it is: index and the whole count, also above a lowered limit |
    /// | sliding counter → sliding counter, same window | the state as it is: both counts |
    /// | any other pair | [`used`](Algorithm::used) under `from` (rounded up), recorded as just admitted under these parameters by [`with_used`](Algorithm::with_used): a bucket's whole debt, a window's whole count in `now`'s window |
    /// | to or from the sliding window log | the same `used` / `with_used` pair (see [`SlidingWindowLog`]: a log keeps its timestamps, and counts up to `L + 4096` of them) |
    ///
    /// Nothing is capped at the new limit: a window's count saturates only where its packed
    /// counter is full (`max_count`, at least the limit: `2^35 − 1` for a one-minute fixed
    /// window), a bucket's debt at the end of `u64` time. A raised limit gives the key the
    /// difference at once. A lowered one leaves a window key exhausted until enough of its
    /// count has left the window, and a bucket key in debt until the debt is repaid at the
    /// new rate. So flipping a rule down and up again (a reverted reload, a rolling deploy
    /// where two versions touch one key), with refunds and charges in between, never hands
    /// out the same permits twice: 100 used of 100/min, lowered to 10/min, one refunded,
    /// raised back to 100/min, leaves 1.
    ///
    /// Because every permit is carried, converting commutes with giving a take back: a
    /// state with a take converted and then refunded that take's cost at the same instant
    /// has exactly the [`used`](Algorithm::used) count, and admits exactly as much, as the
    /// state converted without the take (for every pair of algorithms, below saturation;
    /// `core/tests/algebra.rs` proves it on random states). A store that finds the key of
    /// an undone take already converted to new parameters may therefore give the take back
    /// as a refund there.
    ///
    /// ```
    /// use tollgate_core::{Algorithm, FixedWindow, Gcra, Nanos, PackedAlgorithm};
    /// let per_sec = PackedAlgorithm::from(Gcra::per_second(10).build().unwrap());
    /// let per_min = PackedAlgorithm::from(FixedWindow::new(100, Nanos::from_secs(60)).unwrap());
    /// let now = Nanos::from_secs(5);
    /// // Four permits taken under GCRA...
    /// let mut state = 0;
    /// for _ in 0..4 {
    ///     state = per_sec.decide(state, now, 1).unwrap().next.unwrap();
    /// }
    /// // ...are four permits used in the new fixed window.
    /// let moved = per_min.rescale(&per_sec, state, now);
    /// assert_eq!(per_min.used(moved, now), 4);
    /// assert_eq!(per_min.peek(moved, now, 1).unwrap().decision.remaining, 95);
    /// // Same parameters: unchanged.
    /// assert_eq!(per_sec.rescale(&per_sec, state, now), state);
    /// ```
    pub fn rescale(&self, from: &PackedAlgorithm, state: u64, now: Nanos) -> u64 {
        if self == from {
            return state;
        }
        match (from.shape(), self.shape()) {
            (Shape::Tat { interval: old }, Shape::Tat { interval }) => {
                crate::gcra::tat::rescale(state, now.as_u64(), old, interval)
            }
            (Shape::Fixed(old), Shape::Fixed(new)) => new.rescale_from(old, state, now),
            (Shape::Counter(old), Shape::Counter(new)) => new.rescale_from(old, state, now),
            (Shape::Tat { .. }, Shape::Fixed(_) | Shape::Counter(_))
            | (Shape::Fixed(_), Shape::Tat { .. } | Shape::Counter(_))
            | (Shape::Counter(_), Shape::Tat { .. } | Shape::Fixed(_)) => {
                self.with_used(now, from.used(state, now))
            }
        }
    }
}

macro_rules! packed_from {
    ($($ty:ident),*) => {$(
        impl From<$ty> for PackedAlgorithm {
            fn from(a: $ty) -> PackedAlgorithm {
                PackedAlgorithm::$ty(a)
            }
        }
        impl From<$ty> for AnyAlgorithm {
            fn from(a: $ty) -> AnyAlgorithm {
                AnyAlgorithm::Packed(PackedAlgorithm::$ty(a))
            }
        }
    )*};
}
packed_from!(
    Gcra,
    TokenBucket,
    LeakyBucket,
    FixedWindow,
    SlidingWindowCounter
);

/// Any of the six algorithms: a single-word one, or the sliding window log.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum AnyAlgorithm {
    /// One of the single-word algorithms.
    Packed(PackedAlgorithm),
    /// The sliding window log (multi-word state).
    Log(SlidingWindowLog),
}

impl From<SlidingWindowLog> for AnyAlgorithm {
    fn from(a: SlidingWindowLog) -> AnyAlgorithm {
        AnyAlgorithm::Log(a)
    }
}

impl From<PackedAlgorithm> for AnyAlgorithm {
    fn from(a: PackedAlgorithm) -> AnyAlgorithm {
        AnyAlgorithm::Packed(a)
    }
}

impl AnyAlgorithm {
    /// The most cost-1 requests admissible at once from a fresh state.
    pub fn limit(&self) -> u64 {
        match self {
            AnyAlgorithm::Packed(a) => a.limit(),
            AnyAlgorithm::Log(a) => a.limit(),
        }
    }

    /// A stable 64-bit version of this algorithm and its parameters, for tagging stored
    /// state: a store that keeps a state with the version it was written under can tell,
    /// on the next check, that the rule changed since and convert the state (with
    /// [`PackedAlgorithm::rescale`], or `used` / `with_used` across the single-word and log
    /// kinds) instead of misreading it. FNV-1a over the algorithm's tag and its validated
    /// numbers: the same in every process and every build, so a fleet in a rolling deploy
    /// agrees on it.
    ///
    /// ```
    /// use tollgate_core::{AlgorithmConfig, Nanos};
    /// let a = AlgorithmConfig::FixedWindow { limit: 10, window: Nanos::from_secs(1) }.build().unwrap();
    /// let b = AlgorithmConfig::FixedWindow { limit: 11, window: Nanos::from_secs(1) }.build().unwrap();
    /// assert_eq!(a.version(), a.version());
    /// assert_ne!(a.version(), b.version());
    /// ```
    pub fn version(&self) -> u64 {
        let (tag, numbers): (u8, [u64; 2]) = match self {
            AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g)) => {
                (1, [g.emission_interval().as_u64(), g.burst_size()])
            }
            AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t)) => {
                (2, [t.refill_interval().as_u64(), t.capacity()])
            }
            AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l)) => {
                (3, [l.drain_interval().as_u64(), l.queue_depth()])
            }
            AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(w)) => {
                (4, [w.window().as_u64(), w.limit()])
            }
            AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(w)) => {
                (5, [w.window().as_u64(), w.limit()])
            }
            AnyAlgorithm::Log(l) => (6, [l.window().as_u64(), l.limit()]),
        };
        let mut hash = crate::hash::Fnv1a::new();
        hash.write(&[tag]);
        for n in numbers {
            hash.write(&n.to_le_bytes());
        }
        hash.finish()
    }

    /// The largest cost one check can ever admit; a larger cost is
    /// [`InsufficientCapacity`].
    ///
    /// ```
    /// use tollgate_core::{AlgorithmConfig, Nanos};
    /// let shaper = AlgorithmConfig::LeakyBucket { amount: 10, period: Nanos::from_secs(1), queue: 4 };
    /// // The one in service plus four waiting.
    /// assert_eq!(shaper.build().unwrap().max_cost(), 5);
    /// ```
    pub fn max_cost(&self) -> u64 {
        match self {
            AnyAlgorithm::Packed(a) => a.max_cost(),
            AnyAlgorithm::Log(a) => a.max_cost(),
        }
    }
}

/// The state behind an [`AnyLimiter`]: one word or a ring.
#[derive(Debug)]
enum AnyState<const N: usize> {
    Word(StateCell),
    Ring(LogRing<N>),
}

/// A direct limiter for a runtime-chosen algorithm. `N` is the ring capacity reserved for
/// a sliding window log (use `0` when no log will be configured: the single-word algorithms
/// then cost 8 bytes of state).
///
/// ```
/// use tollgate_core::{AlgorithmConfig, AnyLimiter, Nanos};
/// let log = AlgorithmConfig::SlidingWindowLog { limit: 2, window: Nanos::from_secs(1) };
/// let limiter = AnyLimiter::<2>::new(log.build().unwrap()).unwrap();
/// assert!(limiter.check_at(Nanos::ZERO).allowed);
/// assert!(limiter.check_at(Nanos::ZERO).allowed);
/// assert!(!limiter.check_at(Nanos::ZERO).allowed);
/// ```
#[derive(Debug)]
pub struct AnyLimiter<const N: usize> {
    algorithm: AnyAlgorithm,
    state: AnyState<N>,
}

impl<const N: usize> AnyLimiter<N> {
    /// A fresh limiter; [`ConfigError::LimitTooLarge`] if a log's limit exceeds `N`.
    pub fn new(algorithm: AnyAlgorithm) -> Result<AnyLimiter<N>, ConfigError> {
        let state = match algorithm {
            AnyAlgorithm::Packed(_) => AnyState::Word(StateCell::new()),
            AnyAlgorithm::Log(log) if log.limit() > N as u64 => {
                return Err(ConfigError::LimitTooLarge { max: N as u64 })
            }
            AnyAlgorithm::Log(_) => AnyState::Ring(LogRing::new()),
        };
        Ok(AnyLimiter { algorithm, state })
    }

    /// The configured algorithm.
    pub fn algorithm(&self) -> &AnyAlgorithm {
        &self.algorithm
    }

    /// Checks `cost` permits at `now`, all or nothing.
    pub fn check_n_at(&self, now: Nanos, cost: u32) -> Result<Decision, InsufficientCapacity> {
        match (&self.algorithm, &self.state) {
            (AnyAlgorithm::Packed(a), AnyState::Word(cell)) => cell.check_at(a, now, cost),
            (AnyAlgorithm::Log(log), AnyState::Ring(ring)) => ring.check_at(log, now, cost),
            // `new` pairs each algorithm with its state; the fields are private.
            (AnyAlgorithm::Packed(_), AnyState::Ring(_))
            | (AnyAlgorithm::Log(_), AnyState::Word(_)) => {
                Err(InsufficientCapacity { max_cost: 0 })
            }
        }
    }

    /// What `cost` permits would get at `now`; consumes nothing.
    pub fn peek_n_at(&self, now: Nanos, cost: u32) -> Result<Decision, InsufficientCapacity> {
        match (&self.algorithm, &self.state) {
            (AnyAlgorithm::Packed(a), AnyState::Word(cell)) => cell.peek_at(a, now, cost),
            (AnyAlgorithm::Log(log), AnyState::Ring(ring)) => ring.peek_at(log, now, cost),
            (AnyAlgorithm::Packed(_), AnyState::Ring(_))
            | (AnyAlgorithm::Log(_), AnyState::Word(_)) => {
                Err(InsufficientCapacity { max_cost: 0 })
            }
        }
    }

    /// Checks one permit at `now`.
    pub fn check_at(&self, now: Nanos) -> Decision {
        self.check_n_at(now, 1)
            .unwrap_or_else(|_| Decision::deny(self.algorithm.limit(), 0, Nanos::MAX, Nanos::MAX))
    }

    /// What one permit would get at `now`.
    pub fn peek_at(&self, now: Nanos) -> Decision {
        self.peek_n_at(now, 1)
            .unwrap_or_else(|_| Decision::deny(self.algorithm.limit(), 0, Nanos::MAX, Nanos::MAX))
    }

    /// Checks one permit, reading `clock` once.
    pub fn check(&self, clock: &impl Clock) -> Decision {
        self.check_at(clock.now())
    }

    /// Checks `cost` permits, reading `clock` once.
    pub fn check_n(&self, clock: &impl Clock, cost: u32) -> Result<Decision, InsufficientCapacity> {
        self.check_n_at(clock.now(), cost)
    }
}
