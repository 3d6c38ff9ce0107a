//! The packed layouts of the window algorithms, through their public `pack`/`unpack`:
//! round trips over the whole domain (any window index of a `u64` time, counts up to the
//! limit), `pack ∘ unpack` the identity on every word, and `decide` on a packed state at
//! its window boundaries reading the fields back exactly.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate_core::{Algorithm, FixedWindow, Nanos, SlidingWindowCounter};
use tollgate_fuzz::{Count, Span};

#[derive(Arbitrary, Debug)]
struct Input {
    limit: Count,
    window: Span,
    /// Reduced modulo the number of windows in `u64` time.
    index: u64,
    /// Reduced modulo `limit + 1`.
    counts: [u64; 2],
    /// Any word, for `pack ∘ unpack`.
    word: u64,
    /// Reduced modulo the window: where in window `index` the check happens.
    offset: u64,
    cost: u8,
}

/// The first instant of window `index`, plus `offset` (saturating: the last window may
/// end at `u64::MAX`, which still lies in it).
fn instant(index: u64, window: u64, offset: u64) -> Nanos {
    Nanos::new((index * window).saturating_add(offset % window))
}

fuzz_target!(|input: Input| {
    let (limit, window) = (input.limit.get(), input.window.get());
    let w = window.as_u64();
    // Fields at their boundaries as well as the fuzzed ones.
    let (first, last) = (0, u64::MAX.checked_div(w).unwrap_or(0));
    let indices = [first, last, input.index % last.saturating_add(1).max(1)];
    let counts = [0, limit, input.counts[0] % limit.saturating_add(1).max(1)];
    let prevs = [0, limit, input.counts[1] % limit.saturating_add(1).max(1)];
    let cost = u32::from(input.cost) % 4;

    if let Ok(fixed) = FixedWindow::new(limit, window) {
        assert_eq!(fixed.pack(0, 0), 0, "a fresh key is state 0");
        let (i, c) = fixed.unpack(input.word);
        assert_eq!(fixed.pack(i, c), input.word, "pack ∘ unpack");
        for &index in &indices {
            for &count in &counts {
                let state = fixed.pack(index, count);
                assert_eq!(fixed.unpack(state), (index, count), "unpack ∘ pack");
                let now = instant(index, w, input.offset);
                let Ok(d) = fixed.decide(state, now, cost) else {
                    assert!(u64::from(cost) > limit);
                    continue;
                };
                let fits = count + u64::from(cost) <= limit;
                assert_eq!(d.decision.allowed, fits, "{index}/{count} at {now:?}");
                if let Some(next) = d.next {
                    assert_eq!(fixed.unpack(next), (index, count + u64::from(cost)));
                }
            }
        }
    }

    if let Ok(counter) = SlidingWindowCounter::new(limit, window) {
        assert_eq!(counter.pack(0, 0, 0), 0, "a fresh key is state 0");
        let (i, p, c) = counter.unpack(input.word);
        assert_eq!(counter.pack(i, p, c), input.word, "pack ∘ unpack");
        for &index in &indices {
            for &prev in &prevs {
                for &curr in &counts {
                    let state = counter.pack(index, prev, curr);
                    assert_eq!(counter.unpack(state), (index, prev, curr), "unpack ∘ pack");
                    // At the very start of window `index` the previous window weighs fully.
                    let now = instant(index, w, 0);
                    let Ok(d) = counter.decide(state, now, cost) else {
                        assert!(u64::from(cost) > limit);
                        continue;
                    };
                    let fits = prev + curr + u64::from(cost) <= limit;
                    assert_eq!(d.decision.allowed, fits, "{index}/{prev}/{curr} at {now:?}");
                    if let Some(next) = d.next {
                        assert_eq!(counter.unpack(next), (index, prev, curr + u64::from(cost)));
                    }
                }
            }
        }
    }
});
