//! [`Time`]: how the fuzzed clock moves before a step.

use arbitrary::Arbitrary;

/// A move of the caller's clock. Backwards moves model a late thread or a core whose clock
/// lags; `EndOfTime` drives the saturating paths.
#[derive(Arbitrary, Copy, Clone, Debug, PartialEq, Eq)]
pub enum Time {
    /// The same instant as the previous step.
    Same,
    /// Forwards by up to 65 535 ns.
    Forward(u16),
    /// Forwards by up to about 4.3 s.
    Leap(u32),
    /// Backwards by up to 65 535 ns.
    Back(u16),
    /// Backwards by up to about 4.3 s.
    FarBack(u32),
    /// Anywhere.
    Absolute(u64),
    /// `u64::MAX − d`: the last representable instants.
    EndOfTime(u16),
}

impl Time {
    /// The clock reading after this move from `now`.
    pub fn apply(self, now: u64) -> u64 {
        match self {
            Time::Same => now,
            Time::Forward(d) => now.saturating_add(u64::from(d)),
            Time::Leap(d) => now.saturating_add(u64::from(d)),
            Time::Back(d) => now.saturating_sub(u64::from(d)),
            Time::FarBack(d) => now.saturating_sub(u64::from(d)),
            Time::Absolute(t) => t,
            Time::EndOfTime(d) => u64::MAX - u64::from(d),
        }
    }
}
