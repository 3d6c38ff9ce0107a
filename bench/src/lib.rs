//! Benchmark support for tollgate (work in progress).
