//! [`Count`]: a fuzzed limit, burst, capacity or queue depth.

use arbitrary::Arbitrary;

/// A count parameter: small ones exercise the algorithms, large ones the validation and
/// the overflow guards.
#[derive(Arbitrary, Copy, Clone, Debug, PartialEq, Eq)]
pub enum Count {
    /// 0 to 255 (0 is a `ConfigError` for most parameters).
    Small(u8),
    /// 0 to 65 535.
    Medium(u16),
    /// Anything.
    Any(u64),
    /// `u64::MAX`.
    Max,
}

impl Count {
    /// The count.
    pub fn get(self) -> u64 {
        match self {
            Count::Small(c) => u64::from(c),
            Count::Medium(c) => u64::from(c),
            Count::Any(c) => c,
            Count::Max => u64::MAX,
        }
    }
}
