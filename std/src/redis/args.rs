//! How a tier's algorithm and a request's cost are encoded as script arguments.

use crate::{Algorithm, AnyAlgorithm, PackedAlgorithm};

/// An algorithm argument as the scripts' `arg` reads it (prelude.lua): below 2^52, hex
/// without padding (at most 13 digits: one `tonumber(s, 16)`, exact in a Lua double, and
/// cheaper there than a decimal), else 16 hex digits.
pub(crate) fn arg(value: u64) -> String {
    if value < 1 << 52 {
        format!("{value:x}")
    } else {
        format!("{value:016x}")
    }
}

/// The script's name for `algorithm`'s transition (the token bucket runs GCRA's).
pub(crate) fn script_algorithm(algorithm: &AnyAlgorithm) -> &'static str {
    match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(_) | PackedAlgorithm::TokenBucket(_)) => "gcra",
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(_)) => "leaky",
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(_)) => "fixed",
        AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(_)) => "swc",
        AnyAlgorithm::Log(_) => "log",
    }
}

/// Appends the script name and arguments of `algorithm` for a request of `cost` (already
/// checked against its `max_cost`).
pub(crate) fn encode_algorithm(algorithm: &AnyAlgorithm, cost: u32, args: &mut Vec<String>) {
    let cost64 = u64::from(cost);
    args.push(script_algorithm(algorithm).to_owned());
    match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g)) => encode_gcra(g, cost, args),
        AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t)) => {
            encode_gcra(t.as_gcra(), cost, args)
        }
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l)) => {
            let interval = l.drain_interval().as_u64();
            // cost ≤ max_cost, which the core keeps within u64 ns of drain.
            let drain = interval.saturating_mul(cost64);
            args.push(arg(interval));
            args.push(arg(l.horizon().as_u64()));
            args.push(arg(drain));
            args.push(arg(cost64));
        }
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(w)) => {
            args.push(arg(w.window().as_u64()));
            args.push(arg(w.limit()));
            args.push(arg(cost64));
        }
        AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(w)) => {
            args.push(arg(w.window().as_u64()));
            args.push(arg(w.limit()));
            args.push(arg(cost64));
        }
        AnyAlgorithm::Log(log) => {
            args.push(arg(log.window().as_u64()));
            args.push(arg(log.limit()));
            args.push(arg(cost64));
        }
    }
}

fn encode_gcra(g: &crate::Gcra, cost: u32, args: &mut Vec<String>) {
    let interval = g.emission_interval().as_u64();
    args.push(arg(interval));
    args.push(arg(g.tolerance().as_u64()));
    // cost ≤ burst, so cost·T ≤ τ fits (checked by the core at construction).
    args.push(arg(interval.saturating_mul(u64::from(cost))));
    args.push(arg(u64::from(cost)));
}
