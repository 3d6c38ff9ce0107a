//! loom models of tollgate's concurrent executors: the lock-free cells, the sequence-locked
//! log ring and the keyed table.
//!
//! Everything here is compiled only with `RUSTFLAGS="--cfg tollgate_loom"` (run
//! `bash scripts/stages/loom.sh`); without the cfg this crate is empty, so
//! `cargo test --workspace` builds nothing here. Under the cfg, `tollgate-core`'s `sync.rs`
//! swaps loom's checked atomics in, so the models explore every interleaving (up to the
//! preemption bound, see [`ModelRun`]) of the very code users run.
//!
//! A model is a [`ModelRun`]: a few threads, each running a short list of [`Op`]s (checks
//! and peeks, mixed costs, `now` values out of order) against one shared [`Subject`]. After
//! every explored execution it asserts that the results and the final state are those of
//! some sequential order of the same operations, run through an [`Oracle`]
//! ([`linearization::find`]): linearizability, checked exhaustively for small histories.
//!
//! | subject | oracle | deliberately broken twin |
//! |---|---|---|
//! | [`CellSubject`] (`StateCell` + algorithm) | [`CellOracle`]: the pure `decide`, cross-checked against the [`reference`](tollgate_core::reference) model | [`BrokenCell`]: load + store instead of CAS |
//! | [`LogSubject`] (`LogRing` seqlock) | [`LogOracle`]: `SlidingWindowLogModel` | [`BrokenLogRing`]: no writer claim |
//! | [`KeyedSubject`] (`tollgate::KeyedLimiter`) | [`KeyedOracle`]: a capacity-bounded list of keyed states, idle eviction, then `Refuse` or `Evict` (any victim) | [`BrokenKeyedTable`]: inserts without a lock |
//!
//! Two races inside the keyed table are modelled directly on `KeyedLimiter` in
//! `tests/keyed_races.rs`: a lock-free lookup (peek, and the policy layer's
//! `update_resident`) racing a cuckoo move of its key, and the exact-key pin handshake
//! (with a key type whose contents loom tracks). Their broken twins run the same table
//! with one protocol step switched off (`tollgate::LoomFault`, loom builds only).
//! `tests/keyed_summary.rs` races two debt-summary records, and `tests/keyed_borrow.rs`
//! `WhenFull::Refuse`'s quota borrow (a shard taking another shard's unused unit) against
//! the lender's own insert, the same way.
//!
//! The lease cell (`tollgate::lease::LeaseCell`: a hot key's leased permits, spent
//! lock-free) is modelled directly in `tests/lease_cell.rs`: spends racing a refill and an
//! expiry, and a spend racing the cell's hand-off to another key, checked by exact permit
//! accounting, with broken twins through `tollgate::lease::LeaseFault` (loom builds only).
//!
//! The policy layer (`tollgate::policy::Policy`: all-or-nothing tiers, the hot-reload swap
//! racing checks) is modelled directly in `tests/policy.rs` through its public API, with a
//! sequential replay as oracle and broken twins (tiers without compensation, a reload that
//! snapshots then swaps). Its rule-set publication (the generation, the per-generation
//! holds and set slots of `policy::published`), per-key cells and shard locks are all
//! loom-visible.
// Without the cfg the crate is empty, so the links above have nothing to point at.
#![cfg_attr(not(tollgate_loom), allow(rustdoc::broken_intra_doc_links))]
#![cfg(tollgate_loom)]

mod broken_cell;
mod broken_keyed_table;
mod broken_log_ring;
mod cell_oracle;
mod cell_subject;
mod final_state;
mod keyed_oracle;
mod keyed_subject;
pub mod linearization;
mod log_oracle;
mod log_subject;
mod model_run;
mod op;
mod oracle;
mod reference_model;
mod refusal;
mod subject;

pub use broken_cell::BrokenCell;
pub use broken_keyed_table::BrokenKeyedTable;
pub use broken_log_ring::BrokenLogRing;
pub use cell_oracle::CellOracle;
pub use cell_subject::CellSubject;
pub use final_state::FinalState;
pub use keyed_oracle::KeyedOracle;
pub use keyed_subject::{FixedHasher, KeyedSubject};
pub use log_oracle::LogOracle;
pub use log_subject::LogSubject;
pub use model_run::{explore, explore_within, ModelRun, DEFAULT_PREEMPTION_BOUND};
pub use op::Op;
pub use oracle::Oracle;
pub use reference_model::ReferenceModel;
pub use refusal::Refusal;
pub use subject::Subject;

/// What one operation answered.
pub type Answer = Result<tollgate_core::Decision, Refusal>;
