//! [`Cost`]: the permits a fuzzed step asks for.

use arbitrary::Arbitrary;

/// A request's cost, mostly small (so admissions and denials alternate), sometimes huge.
#[derive(Arbitrary, Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cost {
    /// 1, the common case.
    One,
    /// 0: a probe that must never write.
    Zero,
    /// 0 to 255.
    Small(u8),
    /// Anything.
    Any(u32),
    /// `u32::MAX`.
    Max,
}

impl Cost {
    /// The cost as the API takes it.
    pub fn get(self) -> u32 {
        match self {
            Cost::One => 1,
            Cost::Zero => 0,
            Cost::Small(c) => u32::from(c),
            Cost::Any(c) => c,
            Cost::Max => u32::MAX,
        }
    }
}
