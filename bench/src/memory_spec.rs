//! [`MemorySpec`]: a named memory case, measured with the `compare` binary's
//! [`CountingAllocator`].

use crate::{CountingAllocator, Row, Scale};

/// A memory case's name and how to measure it (bytes per key, per contender); one spec
/// may report several rows (exact and fingerprint storage of the same keys).
///
/// ```
/// use tollgate_bench::{MemorySpec, Row, Unit};
/// let spec = MemorySpec::new("nothing", |_, _| vec![Row {
///     name: "nothing".into(), unit: Unit::BytesPerKey, values: [None, None, None],
/// }]);
/// assert_eq!(spec.name, "nothing");
/// ```
#[derive(Copy, Clone, Debug)]
pub struct MemorySpec {
    /// The case name.
    pub name: &'static str,
    /// Measures the case; needs the allocator installed as the global allocator.
    pub measure: fn(&Scale, &CountingAllocator) -> Vec<Row>,
}

impl MemorySpec {
    /// A spec.
    pub fn new(
        name: &'static str,
        measure: fn(&Scale, &CountingAllocator) -> Vec<Row>,
    ) -> MemorySpec {
        MemorySpec { name, measure }
    }
}
