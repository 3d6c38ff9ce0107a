//! [`KeyedError`]: why a keyed check gave no decision.

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
    /// every entry it could replace is still limited. Fail closed: treat as a deny, and
    /// consider a larger capacity.
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
