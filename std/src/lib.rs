//! # tollgate
//!
//! The std layer of tollgate: re-exports [`tollgate_core`].

pub use tollgate_core::*;

pub mod policy;
