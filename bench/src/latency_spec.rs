//! [`LatencySpec`]: a named latency case, whose figures are percentiles of single
//! operations each timed on its own (not the median batch mean of a [`TimedCase`]).
//!
//! [`TimedCase`]: crate::TimedCase

use crate::{Row, Scale, Schedule};

/// A latency case's name and how to measure it; one spec reports several rows (one per
/// percentile).
///
/// ```
/// use tollgate_bench::{LatencySpec, Row, Unit};
/// let spec = LatencySpec::new("nothing", |_, _| vec![Row {
///     name: "nothing".into(), unit: Unit::NsP99, values: [None, None, None],
/// }]);
/// assert_eq!(spec.name, "nothing");
/// ```
#[derive(Copy, Clone, Debug)]
pub struct LatencySpec {
    /// The case name.
    pub name: &'static str,
    /// Measures the case with the run's schedule (rounds, and the time per round and
    /// contender).
    pub measure: fn(&Scale, Schedule) -> Vec<Row>,
}

impl LatencySpec {
    /// A spec.
    pub fn new(name: &'static str, measure: fn(&Scale, Schedule) -> Vec<Row>) -> LatencySpec {
        LatencySpec { name, measure }
    }
}
