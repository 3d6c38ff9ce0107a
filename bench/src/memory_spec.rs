//! [`MemorySpec`]: a named memory case, measured with the `compare` binary's
//! [`CountingAllocator`].

use crate::{CountingAllocator, Row, Scale};

/// A memory case's name and how to measure it (bytes per key, per contender).
///
/// ```
/// use tollgate_bench::{MemorySpec, Row, Unit};
/// let spec = MemorySpec::new("nothing", |_, _| Row {
///     name: "nothing".into(), unit: Unit::BytesPerKey, values: [None, None, None],
/// });
/// assert_eq!(spec.name, "nothing");
/// ```
#[derive(Copy, Clone, Debug)]
pub struct MemorySpec {
    /// The case name.
    pub name: &'static str,
    /// Measures the case; needs the allocator installed as the global allocator.
    pub measure: fn(&Scale, &CountingAllocator) -> Row,
}

impl MemorySpec {
    /// A spec.
    pub fn new(name: &'static str, measure: fn(&Scale, &CountingAllocator) -> Row) -> MemorySpec {
        MemorySpec { name, measure }
    }
}
