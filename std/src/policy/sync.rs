//! The one place in the policy layer that names atomic types, so a model checker or a
//! portable backend can be swapped in here alone.

pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
