//! Criterion benches: placeholder until the case catalog is wired in.
fn main() {}
