//! [`Unit`]: what a case's figures measure.

/// The unit of a case's figures.
///
/// ```
/// use tollgate_bench::Unit;
/// assert_eq!(Unit::Ns.name(), "ns");
/// assert_eq!(Unit::BytesPerKey.name(), "bytes_per_key");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Median nanoseconds per operation.
    Ns,
    /// Heap bytes per stored key.
    BytesPerKey,
}

impl Unit {
    /// The name used in the table and the JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::BytesPerKey => "bytes_per_key",
        }
    }
}
