//! The one place in `tollgate-bench` that names atomic types (the floor's cells and the
//! counting allocator's tallies). The bench never runs under loom, so these are the std types.

pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
