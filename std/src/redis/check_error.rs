//! [`CheckError`]: a check that cannot be answered at all (as opposed to a deny, or a
//! degraded decision when Redis fails, which are answers).

use std::fmt;

use crate::InsufficientCapacity;

/// Why a check returned no decision.
///
/// ```
/// use tollgate::redis::CheckError;
/// use tollgate::InsufficientCapacity;
/// let e = CheckError::from(InsufficientCapacity { max_cost: 5 });
/// assert_eq!(e, CheckError::InsufficientCapacity(InsufficientCapacity { max_cost: 5 }));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckError {
    /// The cost exceeds what some rule could ever admit at once: retrying cannot help.
    InsufficientCapacity(InsufficientCapacity),
    /// The key is empty or contains `}`: the key must be exactly the Redis hash tag, so
    /// that the tiers of one check share a cluster slot and no two (key, scope) pairs share
    /// a Redis key.
    InvalidKey,
    /// A scoped check passed a number of scopes other than one per rule.
    ScopeCount {
        /// Rules of the limiter.
        rules: usize,
        /// Scopes passed.
        scopes: usize,
    },
    /// A blocking call was made from inside an async runtime (it would block the
    /// runtime's thread); use the async limiter there.
    BlockingInAsyncContext,
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::InsufficientCapacity(e) => e.fmt(f),
            CheckError::InvalidKey => f.write_str("key must be non-empty and contain no '}'"),
            CheckError::ScopeCount { rules, scopes } => {
                write!(f, "{scopes} scopes for {rules} rules")
            }
            CheckError::BlockingInAsyncContext => {
                f.write_str("blocking Redis limiter called from inside an async runtime")
            }
        }
    }
}

impl std::error::Error for CheckError {}

impl From<InsufficientCapacity> for CheckError {
    fn from(e: InsufficientCapacity) -> CheckError {
        CheckError::InsufficientCapacity(e)
    }
}
