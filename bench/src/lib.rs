//! # tollgate-bench
//!
//! Every speed and memory claim of tollgate is made here, by measurement, side by side with
//! [`governor`] and with the *floor*: the same work done inline with no library (a clock
//! read, a load and a compare-and-swap on one `AtomicU64`, or on a flat hash-indexed array
//! of them for keyed cases).
//!
//! - `cargo run --release -p tollgate-bench --bin compare [-- --quick] [--json FILE]` runs
//!   every case in one process, interleaving the contenders over several rounds, and prints
//!   medians and ratios (see [`TimedCase::measure`]).
//! - `cargo bench -p tollgate-bench` runs the same cases under criterion.
//!
//! The machine is assumed noisy: compare ratios within one run, not absolute times across
//! runs. One-thread batches are timed by the measuring thread's CPU time (see
//! [`Stopwatch`]), so other processes do not inflate them; two-thread batches by wall time
//! (they measure contention, which needs both threads running at once, so an idle machine).

mod case_spec;
pub mod clock_cases;
mod contender;
mod counting_allocator;
pub mod direct_cases;
mod floor_cell;
mod floor_table;
#[cfg(feature = "http")]
pub mod http_cases;
mod key_set;
pub mod keyed_cases;
mod keyed_check;
mod latency_spec;
pub mod loops;
pub mod memory_cases;
mod memory_spec;
pub mod policy_cases;
mod report;
mod row;
mod split_mix;
mod stopwatch;
mod sync;
mod timed_case;
pub mod tollgate_keyed;
mod unit;
mod zipf;

pub use case_spec::{CaseSpec, Scale};
pub use contender::Contender;
pub use counting_allocator::CountingAllocator;
pub use floor_cell::FloorCell;
pub use floor_table::FloorTable;
pub use key_set::KeySet;
pub use keyed_check::KeyedCheck;
pub use latency_spec::LatencySpec;
pub use memory_spec::MemorySpec;
pub use report::Report;
pub use row::Row;
pub use split_mix::SplitMix64;
pub use stopwatch::{Stopwatch, TimeSource};
pub use timed_case::{Runner, Schedule, TimedCase};
pub use unit::Unit;
pub use zipf::Zipf;

/// Every timed case, in report order.
pub fn timed_specs() -> Vec<CaseSpec> {
    let mut specs = direct_cases::specs();
    specs.extend(clock_cases::specs());
    specs.extend(keyed_cases::specs());
    specs.extend(policy_cases::specs());
    specs
}

/// Every latency case (percentiles of single operations), in report order.
pub fn latency_specs() -> Vec<LatencySpec> {
    policy_cases::latency_specs()
}

/// Every memory case, in report order.
pub fn memory_specs() -> Vec<MemorySpec> {
    memory_cases::specs()
}
