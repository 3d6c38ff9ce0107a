//! [`Span`]: a fuzzed period, window or interval.

use arbitrary::Arbitrary;
use tollgate_core::Nanos;

/// A length of time: nanosecond-scale ones make a short trace cross many windows and
/// emission intervals; the rest reach realistic and extreme configurations.
#[derive(Arbitrary, Copy, Clone, Debug, PartialEq, Eq)]
pub enum Span {
    /// 0 to 255 ns (0 is a `ConfigError`).
    Nanos(u8),
    /// 0 to 65 535 µs.
    Micros(u16),
    /// 0 to 65 535 ms.
    Millis(u16),
    /// 0 to 65 535 s.
    Secs(u16),
    /// Any number of ns.
    Any(u64),
}

impl Span {
    /// The span.
    pub fn get(self) -> Nanos {
        match self {
            Span::Nanos(n) => Nanos::new(u64::from(n)),
            Span::Micros(n) => Nanos::from_micros(u64::from(n)),
            Span::Millis(n) => Nanos::from_millis(u64::from(n)),
            Span::Secs(n) => Nanos::from_secs(u64::from(n)),
            Span::Any(n) => Nanos::new(n),
        }
    }
}
