//! [`Unit`]: what a case's figures measure.

/// The unit of a case's figures.
///
/// ```
/// use tollgate_bench::Unit;
/// assert_eq!(Unit::Ns.name(), "ns");
/// assert_eq!(Unit::BytesPerKey.name(), "bytes_per_key");
/// assert_eq!(Unit::NsP99.name(), "ns_p99");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Median nanoseconds per operation.
    Ns,
    /// Heap bytes per stored key.
    BytesPerKey,
    /// Median (50th percentile) nanoseconds of one operation, each timed on its own.
    NsP50,
    /// 99th percentile nanoseconds of one operation, each timed on its own.
    NsP99,
}

impl Unit {
    /// The name used in the table and the JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::BytesPerKey => "bytes_per_key",
            Unit::NsP50 => "ns_p50",
            Unit::NsP99 => "ns_p99",
        }
    }
}
