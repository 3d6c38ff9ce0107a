//! Totality of every single-word operation: `decide`, `peek`, `is_idle`, `undo`, `refund`,
//! `used`, `with_used` and `rescale` on any packed state (including words no trace can
//! produce, e.g. one restored with `StateCell::from_state` from corrupted storage), any
//! `now` and any cost must not panic or overflow, and must keep their promises: a
//! decision well formed; an undo with nothing recorded since restores the state; a refund
//! of a take admits no more than before it; a rescale to the same parameters is the
//! identity, and to others never admits a key that had used the new limit.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate_core::{
    Algorithm, FixedWindow, Gcra, LeakyBucket, Nanos, PackedAlgorithm, SlidingWindowCounter,
    TokenBucket,
};
use tollgate_fuzz::{check_decision, Cost, Count, Span};

/// One of the five single-word algorithms, from arbitrary numbers.
#[derive(Arbitrary, Debug)]
enum Params {
    Gcra {
        interval: Span,
        burst: Count,
    },
    TokenBucket {
        capacity: Count,
        amount: Count,
        period: Span,
    },
    LeakyBucket {
        interval: Span,
        queue: Count,
    },
    FixedWindow {
        limit: Count,
        window: Span,
    },
    SlidingWindowCounter {
        limit: Count,
        window: Span,
    },
}

impl Params {
    fn build(&self) -> Option<PackedAlgorithm> {
        let built = match *self {
            Params::Gcra { interval, burst } => {
                Gcra::from_interval(interval.get().as_u64(), burst.get()).map(Into::into)
            }
            Params::TokenBucket {
                capacity,
                amount,
                period,
            } => TokenBucket::new(capacity.get(), amount.get(), period.get()).map(Into::into),
            Params::LeakyBucket { interval, queue } => {
                LeakyBucket::from_interval(interval.get(), queue.get()).map(Into::into)
            }
            Params::FixedWindow { limit, window } => {
                FixedWindow::new(limit.get(), window.get()).map(Into::into)
            }
            Params::SlidingWindowCounter { limit, window } => {
                SlidingWindowCounter::new(limit.get(), window.get()).map(Into::into)
            }
        };
        built.ok()
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    params: Params,
    /// Parameters to rescale to.
    to: Params,
    state: u64,
    now: u64,
    cost: Cost,
    used: u64,
}

/// Whether one cost-1 request would be admitted.
fn admits_one(algorithm: &PackedAlgorithm, state: u64, now: Nanos) -> bool {
    algorithm
        .decide(state, now, 1)
        .is_ok_and(|o| o.decision.allowed)
}

fuzz_target!(|input: Input| {
    let Some(algorithm) = input.params.build() else {
        return;
    };
    let (now, cost) = (Nanos::new(input.now), input.cost.get());
    let _ = algorithm.is_idle(input.state, now);
    let decided = algorithm.decide(input.state, now, cost);
    let peeked = algorithm.peek(input.state, now, cost);
    match decided {
        Ok(outcome) => {
            check_decision(&outcome.decision, algorithm.limit());
            assert!(u64::from(cost) <= algorithm.max_cost());
            let peeked = peeked.expect("peek agrees with decide");
            assert_eq!(peeked.decision, outcome.decision, "peek vs decide");
            assert_eq!(peeked.next, None, "a peek never writes");
            if !outcome.decision.allowed || cost == 0 {
                assert_eq!(outcome.next, None, "a deny or a probe never writes");
            }
            if let Some(after) = outcome.next {
                assert_eq!(algorithm.undo(after, input.state, after, cost), input.state);
                let refunded = algorithm.refund(after, now, cost);
                if admits_one(&algorithm, refunded, now) {
                    assert!(admits_one(&algorithm, input.state, now), "refund gave more");
                }
            }
        }
        Err(e) => {
            assert!(u64::from(cost) > algorithm.max_cost());
            assert_eq!(e.max_cost, algorithm.max_cost());
            assert_eq!(peeked.map(|o| o.decision), Err(e));
        }
    }
    // The conversion operations.
    let _ = algorithm.used(input.state, now);
    let filled = algorithm.with_used(now, input.used);
    if input.used >= algorithm.limit() {
        assert!(
            !admits_one(&algorithm, filled, now),
            "with_used(limit) admits"
        );
    }
    assert_eq!(algorithm.rescale(&algorithm, input.state, now), input.state);
    if let Some(to) = input.to.build() {
        let moved = to.rescale(&algorithm, input.state, now);
        if algorithm.used(input.state, now) >= to.limit() {
            assert!(
                !admits_one(&to, moved, now),
                "rescale admitted past the new limit"
            );
        }
    }
});
