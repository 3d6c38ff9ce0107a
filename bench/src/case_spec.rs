//! [`CaseSpec`] and [`Scale`]: a named, lazily built timed case, so a run holds only one
//! case's tables (up to a million keys per contender) in memory at a time.

use crate::TimedCase;

/// Key counts and order lengths of the keyed cases.
///
/// ```
/// let scale = tollgate_bench::Scale::standard();
/// assert_eq!(scale.big_keys, 1_000_000);
/// ```
#[derive(Copy, Clone, Debug)]
pub struct Scale {
    /// The "100k" key count.
    pub mid_keys: usize,
    /// The "1m" key count.
    pub big_keys: usize,
    /// Length of a generated Zipf order (round-robin orders are the key set itself).
    pub order_len: usize,
}

impl Scale {
    /// The sizes the case names promise: 100k and 1M keys.
    pub fn standard() -> Scale {
        Scale {
            mid_keys: 100_000,
            big_keys: 1_000_000,
            order_len: 1 << 21,
        }
    }
}

/// A case's name and how to build it.
///
/// ```
/// use tollgate_bench::{CaseSpec, TimedCase};
/// let spec = CaseSpec::new("nothing", |_| TimedCase::new("nothing"));
/// assert_eq!(spec.name, "nothing");
/// ```
#[derive(Copy, Clone, Debug)]
pub struct CaseSpec {
    /// The case name.
    pub name: &'static str,
    /// Builds the case (tables filled, orders generated) at a scale.
    pub build: fn(&Scale) -> TimedCase,
}

impl CaseSpec {
    /// A spec.
    pub fn new(name: &'static str, build: fn(&Scale) -> TimedCase) -> CaseSpec {
        CaseSpec { name, build }
    }
}
