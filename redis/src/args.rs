//! How a tier is written for the scripts: its algorithm's arguments at a request's cost, its
//! state tag and its *spec* (what a call's plan argument holds per tier), the texts
//! formatted once per thread and cached.

use std::fmt::Write as _;

use tollgate::{Algorithm, AnyAlgorithm, Nanos, PackedAlgorithm};

/// An algorithm argument as the scripts' `arg` reads it (prelude.lua): below 2^52, hex
/// without padding (at most 13 digits: one `tonumber(s, 16)`, exact in a Lua double, and
/// cheaper there than a decimal), else 16 hex digits.
fn arg(value: u64) -> String {
    if value < 1 << 52 {
        format!("{value:x}")
    } else {
        format!("{value:016x}")
    }
}

/// The script's name for `algorithm`'s transition (the token bucket runs GCRA's).
fn script_algorithm(algorithm: &AnyAlgorithm) -> &'static str {
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
fn encode_algorithm(algorithm: &AnyAlgorithm, cost: u32, args: &mut Vec<String>) {
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

fn encode_gcra(g: &tollgate::Gcra, cost: u32, args: &mut Vec<String>) {
    let interval = g.emission_interval().as_u64();
    args.push(arg(interval));
    args.push(arg(g.tolerance().as_u64()));
    // cost ≤ burst, so cost·T ≤ τ fits (checked by the core at construction).
    args.push(arg(interval.saturating_mul(u64::from(cost))));
    args.push(arg(u64::from(cost)));
}

/// Appends one tier's *spec* to a call's plan argument, which starts at `start` in `text`
/// (see `scripts/store.lua`), after a `;` if it is not the first: space-separated words, its algorithm's first encoded part, its
/// state tag, the most its window count holds, then the rest of the encoding. The script
/// parses a plan once and remembers it, so the tiers of a call cost one argument, read by
/// one table lookup.
pub(super) fn push_tier_spec(text: &mut String, start: usize, algorithm: &AnyAlgorithm, cost: u32) {
    if text.len() > start {
        text.push(';');
    }
    with_cached(algorithm, Some(cost), |texts| text.push_str(&texts.spec));
}

/// Appends what the deny cache's identity says about a tier's algorithm: its state tag
/// ([`push_tag`]) and script parameters ([`push_params`]).
pub(super) fn push_tier_identity(text: &mut String, algorithm: &AnyAlgorithm) {
    // Any cost's entry will do: the identity part has no cost in it.
    with_cached(algorithm, None, |texts| text.push_str(&texts.identity));
}

/// Runs `f` on the texts of `algorithm` at `cost` (any cost if `None`), from this thread's
/// cache (formatting and remembering them on a miss; at cost 1 for `None`, the commonest).
fn with_cached(algorithm: &AnyAlgorithm, cost: Option<u32>, f: impl FnOnce(&TierTexts)) {
    SPECS.with(|cache| {
        // Not reentrant: nothing below calls back into this function.
        let mut cache = cache.borrow_mut();
        let cache = &mut *cache;
        let hit = cache
            .entries
            .iter()
            .flatten()
            .find(|(a, c, _)| a == algorithm && cost.is_none_or(|cost| *c == cost));
        if let Some((_, _, texts)) = hit {
            f(texts);
            return;
        }
        let cost = cost.unwrap_or(1);
        let mut identity = String::with_capacity(64);
        push_tag(&mut identity, algorithm);
        push_params(&mut identity, algorithm);
        let texts = TierTexts {
            spec: tier_spec(algorithm, cost).into_boxed_str(),
            identity: identity.into_boxed_str(),
        };
        f(&texts);
        let slot = cache.next;
        cache.next = (slot + 1) % SPEC_CACHE;
        cache.entries[slot] = Some((*algorithm, cost, texts));
    });
}

/// How many (algorithm, cost) pairs each thread remembers (see [`SpecCache`]).
const SPEC_CACHE: usize = 8;

/// The texts a call and the deny cache write for one tier.
struct TierTexts {
    /// Its spec, at the cost it was made for ([`tier_spec`]).
    spec: Box<str>,
    /// Its tag and parameters, for the deny cache's identity (no cost in it).
    identity: Box<str>,
}

/// The tier texts this thread wrote last, with the algorithm and cost each was written
/// for: a pure cache of [`tier_spec`], [`push_tag`] and [`push_params`], which depend on
/// nothing else. A server checks the same few tiers at the same cost over and over, and
/// each text is half a dozen formatted numbers; the cache keeps them from being formatted
/// on every call. Replaced round robin.
#[derive(Default)]
struct SpecCache {
    entries: [Option<(AnyAlgorithm, u32, TierTexts)>; SPEC_CACHE],
    next: usize,
}

thread_local! {
    static SPECS: std::cell::RefCell<SpecCache> = std::cell::RefCell::default();
}

/// One tier's spec (see [`push_tier_spec`]).
fn tier_spec(algorithm: &AnyAlgorithm, cost: u32) -> String {
    let mut spec = String::with_capacity(80);
    let mut tag = String::with_capacity(33);
    let cmax = push_tag(&mut tag, algorithm);
    let mut encoded = Vec::with_capacity(6);
    encode_algorithm(algorithm, cost, &mut encoded);
    let mut parts = encoded.into_iter();
    spec.extend(parts.next());
    spec.push(' ');
    spec.push_str(&tag);
    spec.push(' ');
    spec.push_str(&arg(cmax));
    for part in parts {
        spec.push(' ');
        spec.push_str(&part);
    }
    spec
}

/// Appends the state tag of `algorithm` (the shape a conversion needs, see
/// `scripts/store.lua`: a letter, then 16 or 32 hex digits, so it ends where its letter
/// says) and returns the most a state counts: a window's full packed count in the core's
/// layout ([`FixedWindow::max_count`](tollgate::FixedWindow::max_count)), a log's
/// [`ceiling`](tollgate::SlidingWindowLog::ceiling), where a charge or a conversion
/// saturates; 0 for the others.
fn push_tag(out: &mut String, algorithm: &AnyAlgorithm) -> u64 {
    // Writing to a `String` cannot fail.
    let (letter, a, b, cmax) = match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g)) => ('t', g.emission_interval(), None, 0),
        AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t)) => {
            ('t', t.refill_interval(), None, 0)
        }
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l)) => ('t', l.drain_interval(), None, 0),
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(w)) => {
            ('f', w.window(), Some(w.limit()), w.max_count())
        }
        AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(w)) => {
            ('c', w.window(), Some(w.limit()), w.max_count())
        }
        AnyAlgorithm::Log(l) => ('l', l.window(), Some(l.limit()), l.ceiling()),
    };
    let _ = write!(out, "{letter}{:016x}", a.as_u64());
    if let Some(b) = b {
        let _ = write!(out, "{b:016x}");
    }
    cmax
}

/// Appends what, besides its state tag, decides a tier's answer in the script: the
/// algorithm's script name, its limit, and its tolerance (GCRA, token bucket) or horizon
/// (leaky bucket), which a bucket's tag does not name.
fn push_params(out: &mut String, algorithm: &AnyAlgorithm) {
    let extra = match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g)) => g.tolerance(),
        AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t)) => t.as_gcra().tolerance(),
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l)) => l.horizon(),
        AnyAlgorithm::Packed(
            PackedAlgorithm::FixedWindow(_) | PackedAlgorithm::SlidingWindowCounter(_),
        )
        | AnyAlgorithm::Log(_) => Nanos::ZERO,
    };
    // Writing to a `String` cannot fail.
    let _ = write!(
        out,
        "/{}/{:x}/{:x}",
        script_algorithm(algorithm),
        algorithm.limit(),
        extra.as_u64()
    );
}

#[cfg(test)]
mod tests {
    use super::{push_params, push_tag, push_tier_identity, push_tier_spec, tier_spec, SPEC_CACHE};
    use tollgate::{AlgorithmConfig, AnyAlgorithm, Nanos};

    /// The spec cache is a pure cache: whatever it holds, evicts or hits, every spec is the
    /// one `tier_spec` formats (each tier of a plan separated by `;`), and every identity
    /// part the one `push_tag` and `push_params` format.
    #[test]
    fn cached_specs_are_the_formatted_ones() {
        let algorithms: Vec<AnyAlgorithm> = (1..=6u64)
            .flat_map(|n| {
                let window = Nanos::from_secs(n);
                [
                    AlgorithmConfig::Gcra {
                        limit: 10 * n,
                        period: window,
                        burst: n,
                    },
                    AlgorithmConfig::FixedWindow {
                        limit: 10 * n,
                        window,
                    },
                ]
            })
            .map(|config| config.build().unwrap())
            .collect();
        // More (algorithm, cost) pairs than the cache holds, visited three times in an order
        // that both hits and evicts.
        assert!(algorithms.len() * 2 > SPEC_CACHE);
        for round in 0..3u32 {
            for (i, algorithm) in algorithms.iter().enumerate() {
                for cost in [1, 1 + round % 2] {
                    let mut plan = String::new();
                    push_tier_spec(&mut plan, 0, algorithm, cost);
                    push_tier_spec(&mut plan, 0, &algorithms[(i + 1) % algorithms.len()], cost);
                    let expected = format!(
                        "{};{}",
                        tier_spec(algorithm, cost),
                        tier_spec(&algorithms[(i + 1) % algorithms.len()], cost)
                    );
                    assert_eq!(plan, expected, "round {round}, algorithm {i}, cost {cost}");
                    let mut identity = String::new();
                    push_tier_identity(&mut identity, algorithm);
                    let mut formatted = String::new();
                    push_tag(&mut formatted, algorithm);
                    push_params(&mut formatted, algorithm);
                    assert_eq!(identity, formatted, "round {round}, algorithm {i}");
                }
            }
        }
        // A GCRA spec names the algorithm, then the tag.
        assert!(tier_spec(&algorithms[0], 1).starts_with("gcra t"));
    }
}
