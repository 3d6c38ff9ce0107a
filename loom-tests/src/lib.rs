//! loom models of tollgate's lock-free cells. Everything here is compiled only with
//! `RUSTFLAGS="--cfg tollgate_loom"`; see `scripts/loom.sh`.
