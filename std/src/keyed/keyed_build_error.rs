//! [`KeyedBuildError`]: why a keyed limiter could not be built.

use core::fmt;

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
    /// The capacity (or the table it needs) does not fit in this machine's address space.
    CapacityTooLarge {
        /// The largest capacity accepted.
        max: usize,
    },
    /// More debt-summary cells than a summary can index or this machine can address
    /// ([`KeyedLimiterBuilder::debt_summary`](crate::KeyedLimiterBuilder::debt_summary)).
    DebtSummaryTooLarge {
        /// The most cells accepted.
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
                write!(f, "debt summary too large: at most {max} cells")
            }
        }
    }
}

impl std::error::Error for KeyedBuildError {}
