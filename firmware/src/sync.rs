//! The one place in the firmware that names atomic types: the tick counters the SysTick
//! handler and `main` share (32-bit, native on Cortex-M3 and up).

pub(crate) use core::sync::atomic::{AtomicU32, Ordering};
