//! The keyed limiter's errors: [`KeyedError`] (why a check gave no decision) and
//! [`KeyedBuildError`] (why a limiter could not be built).

use core::fmt;

use tollgate_core::InsufficientCapacity;

/// Why a keyed check returned no [`Decision`](crate::Decision). A normal deny is not an
/// error: it is a `Decision` with `allowed == false`.
///
/// ```
/// use tollgate::{Gcra, KeyedError, KeyedLimiter, Nanos, WhenFull};
/// let limiter: KeyedLimiter<u64, Gcra> = KeyedLimiter::builder(Gcra::per_second(1).build()?)
///     .capacity(1)
///     .when_full(WhenFull::Refuse)
///     .build()
///     .unwrap();
/// assert!(limiter.check_at(&1, Nanos::ZERO)?.allowed);
/// // Key 1 is still limited, so there is no room for key 2: refused, not denied.
/// assert_eq!(limiter.check_at(&2, Nanos::ZERO), Err(KeyedError::Full));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyedError {
    /// The key is new and there is no room for it: with [`WhenFull::Refuse`](crate::WhenFull),
    /// no idle entry can make room and either the table holds its capacity, or both of the
    /// key's buckets are full with no one- or two-move way out (possible while
    /// [`len`](crate::KeyedLimiter::len) is below the capacity, noticeably with many shards
    /// of few keys each: see [`WhenFull::Refuse`](crate::WhenFull::Refuse)). Fail closed:
    /// treat as a deny, and consider a larger capacity or fewer shards.
    Full,
    /// The cost exceeds what the limit can ever admit at once; retrying cannot succeed.
    InsufficientCapacity(InsufficientCapacity),
}

impl From<InsufficientCapacity> for KeyedError {
    fn from(error: InsufficientCapacity) -> KeyedError {
        KeyedError::InsufficientCapacity(error)
    }
}

impl fmt::Display for KeyedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedError::Full => f.write_str("no room for a new key: the keyed table is full"),
            KeyedError::InsufficientCapacity(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for KeyedError {}

/// Why [`KeyedLimiterBuilder::build`](crate::KeyedLimiterBuilder::build) refused.
///
/// ```
/// use tollgate::{Gcra, KeyedBuildError, KeyedLimiter};
/// let built = KeyedLimiter::<u64, Gcra>::builder(Gcra::per_second(1).build().unwrap())
///     .capacity(0)
///     .build();
/// assert_eq!(built.err(), Some(KeyedBuildError::ZeroCapacity));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyedBuildError {
    /// A capacity of zero keys.
    ZeroCapacity,
    /// The capacity is above 2³² − 1 keys, or the table it needs does not fit in this
    /// machine's address space.
    CapacityTooLarge {
        /// The largest capacity accepted.
        max: usize,
    },
    /// A debt summary sized for more debts than it can index or this machine can address
    /// ([`KeyedLimiterBuilder::debt_summary`](crate::KeyedLimiterBuilder::debt_summary)).
    DebtSummaryTooLarge {
        /// The most debts accepted.
        max: usize,
    },
}

impl fmt::Display for KeyedBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedBuildError::ZeroCapacity => f.write_str("capacity must be > 0"),
            KeyedBuildError::CapacityTooLarge { max } => {
                write!(f, "capacity too large: at most {max}")
            }
            KeyedBuildError::DebtSummaryTooLarge { max } => {
                write!(f, "debt summary too large: at most {max} debts")
            }
        }
    }
}

impl std::error::Error for KeyedBuildError {}
