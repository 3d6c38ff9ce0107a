//! The one place the Redis backend names atomic types (the crate-wide rule: atomics only
//! through a `sync` shim, so a model checker could swap them in).

pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
