//! The inverse and conversion operations of every algorithm, against their promises:
//! a refund or an undo never admits more than before the take, a rescale to the same
//! parameters changes nothing and to other parameters carries exactly the permits used
//! (never capped at the new limit, so never admitting beyond it on top of what was used),
//! a take converted and then refunded is the state converted without it (for every pair
//! of the six algorithms), `max_cost` is exactly the largest cost a fresh key admits, and
//! the sliding log's pure transition over a plain vector agrees with the reference model.

use proptest::prelude::*;
use tollgate_core::reference::SlidingWindowLogModel;
use tollgate_core::{
    Algorithm, AlgorithmConfig, AnyAlgorithm, Decision, FixedWindow, Gcra, InsufficientCapacity,
    LeakyBucket, Nanos, PackedAlgorithm, SlidingWindowCounter, SlidingWindowLog,
};

fn cases() -> u32 {
    if cfg!(miri) {
        4
    } else {
        512
    }
}

const WINDOWS: [u64; 5] = [
    1_000,
    1_000_000,
    1_000_000_000,
    60_000_000_000,
    86_400_000_000_000,
];

/// Any single-word algorithm with small limits (so exhausting one is cheap).
fn packed() -> impl Strategy<Value = PackedAlgorithm> {
    (0usize..5, 1u64..40, 0usize..WINDOWS.len(), 1u64..40).prop_filter_map(
        "valid config",
        |(kind, limit, w, extra)| {
            let window = Nanos::new(WINDOWS[w]);
            let config = match kind {
                0 => AlgorithmConfig::Gcra {
                    limit,
                    period: window,
                    burst: extra,
                },
                1 => AlgorithmConfig::TokenBucket {
                    capacity: extra,
                    refill_amount: limit,
                    refill_period: window,
                },
                2 => AlgorithmConfig::LeakyBucket {
                    amount: limit,
                    period: window,
                    queue: extra - 1,
                },
                3 => AlgorithmConfig::FixedWindow { limit, window },
                _ => AlgorithmConfig::SlidingWindowCounter { limit, window },
            };
            match config.build() {
                Ok(AnyAlgorithm::Packed(p)) => Some(p),
                _ => None,
            }
        },
    )
}

/// A state reached by a random trace ending at `now` (times never go past `now`).
fn state_at(a: &PackedAlgorithm, trace: &[(u64, u32)], now: u64) -> u64 {
    let mut state = 0;
    let mut t = now.saturating_sub(trace.iter().map(|s| s.0).sum());
    for &(step, cost) in trace {
        t = (t + step).min(now);
        let cost = cost.min(a.max_cost().min(u64::from(u32::MAX)) as u32);
        if let Ok(outcome) = a.decide(state, Nanos::new(t), cost) {
            state = outcome.next.unwrap_or(state);
        }
    }
    state
}

/// How many cost-1 requests in a row `state` admits at `at`.
fn admits(a: &PackedAlgorithm, mut state: u64, at: u64) -> u64 {
    let mut n = 0;
    while n <= a.limit() + 1 {
        match a.decide(state, Nanos::new(at), 1) {
            Ok(outcome) if outcome.decision.allowed => {
                state = outcome.next.unwrap_or(state);
                n += 1;
            }
            _ => break,
        }
    }
    n
}

fn trace() -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0..1_000_000u64, 0..100_000_000_000u64],
            0u32..8,
        ),
        0..30,
    )
}

fn now() -> impl Strategy<Value = u64> {
    prop_oneof![0..1_000u64, 1_000_000_000_000..1_000_000_000_000_000u64]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// `refund(take(s, c), c)` admits no more than `s` did, now or later, and never more
    /// than a fresh key.
    #[test]
    fn a_refund_never_admits_more_than_before_the_take(
        a in packed(), trace in trace(), now in now(), cost in 1u32..8, later in 0u64..200_000_000_000,
    ) {
        let s = state_at(&a, &trace, now);
        let cost = cost.min(a.max_cost() as u32);
        let taken = a.decide(s, Nanos::new(now), cost).unwrap();
        let Some(after) = taken.next else { return Ok(()) };
        for at in [now, now + later] {
            let refunded = a.refund(after, Nanos::new(at), cost);
            prop_assert!(admits(&a, refunded, at) <= admits(&a, s, at), "{a:?} at {at}");
            prop_assert!(admits(&a, refunded, at) <= admits(&a, 0, at));
        }
        // Refunded at the take's own time, the take is undone entirely.
        prop_assert_eq!(admits(&a, a.refund(after, Nanos::new(now), cost), now), admits(&a, s, now));
    }

    /// Undoing a take restores the pre-take state when nothing was recorded since, and
    /// gives back exactly the take's share when other requests (sharing the clock
    /// reading, as racing tiers do) were recorded in between.
    #[test]
    fn an_undo_gives_back_exactly_the_take(
        a in packed(), trace in trace(), now in now(), cost in 1u32..8, others in 0u32..5,
    ) {
        let s = state_at(&a, &trace, now);
        let at = Nanos::new(now);
        let cost = cost.min(a.max_cost() as u32);
        let Some(after) = a.decide(s, at, cost).unwrap().next else { return Ok(()) };
        prop_assert_eq!(a.undo(after, s, after, cost), s);
        // Others recorded after the take, and the same others alone.
        let (mut with_take, mut alone) = (after, s);
        for _ in 0..others {
            if let Some(next) = a.decide(with_take, at, 1).unwrap().next {
                with_take = next;
                alone = a.decide(alone, at, 1).unwrap().next.unwrap_or(alone);
            }
        }
        let undone = a.undo(with_take, s, after, cost);
        prop_assert_eq!(admits(&a, undone, now), admits(&a, alone, now), "{:?}", a);
        prop_assert_eq!(a.used(undone, at), a.used(alone, at));
    }

    /// Rescaling to the same parameters changes nothing.
    #[test]
    fn rescale_to_the_same_parameters_is_the_identity(a in packed(), trace in trace(), now in now()) {
        let s = state_at(&a, &trace, now);
        prop_assert_eq!(a.rescale(&a, s, Nanos::new(now)), s);
    }

    /// Rescaling to any other algorithm or numbers never admits beyond the new limit on
    /// top of what was used, and keeps exactly the permits used: not capped at the new
    /// limit, saturating only where the new layout is full.
    #[test]
    fn rescale_never_exceeds_the_new_bound(
        from in packed(), to in packed(), trace in trace(), now in now(),
    ) {
        let s = state_at(&from, &trace, now);
        let at = Nanos::new(now);
        let used = from.used(s, at);
        let moved = to.rescale(&from, s, at);
        prop_assert!(
            admits(&to, moved, now) <= to.limit().saturating_sub(used),
            "{from:?} -> {to:?}: used {used}, moved admits {}", admits(&to, moved, now)
        );
        prop_assert_eq!(to.used(moved, at), used.min(saturation(&to, at)), "{:?} -> {:?}", from, to);
    }

    /// Down and up again: a state moved to other parameters and back (a reverted reload)
    /// has exactly the permits it had used, whatever the intermediate limit.
    #[test]
    fn a_rescale_and_its_rollback_keep_every_permit_used(
        from in packed(), to in packed(), trace in trace(), now in now(), charged in 0u32..100,
    ) {
        let at = Nanos::new(now);
        let s = from.charge(state_at(&from, &trace, now), at, charged);
        let used = from.used(s, at);
        prop_assume!(used < saturation(&to, at) && used < saturation(&from, at));
        let back = from.rescale(&to, to.rescale(&from, s, at), at);
        prop_assert_eq!(from.used(back, at), used, "{:?} -> {:?} -> back", from, to);
        prop_assert_eq!(admits(&from, back, now), admits(&from, s, now));
    }

    /// `max_cost` is exactly the largest cost a fresh key admits.
    #[test]
    fn max_cost_is_the_largest_admitted_cost(a in packed(), now in now()) {
        let max = a.max_cost();
        let at = Nanos::new(now);
        let max32 = u32::try_from(max).unwrap();
        prop_assert!(a.decide(0, at, max32).unwrap().decision.allowed);
        prop_assert_eq!(a.decide(0, at, max32 + 1), Err(InsufficientCapacity { max_cost: max }));
    }

    /// A charge is a take that never denies: where `decide` admits, both write the same
    /// state; otherwise the key goes into debt by the cost (up to what its layout holds).
    #[test]
    fn a_charge_is_a_take_that_never_denies(
        a in packed(), trace in trace(), now in now(), cost in 0u32..100,
    ) {
        let s = state_at(&a, &trace, now);
        let at = Nanos::new(now);
        let charged = a.charge(s, at, cost);
        if let Ok(outcome) = a.decide(s, at, cost) {
            if outcome.decision.allowed && cost > 0 {
                prop_assert_eq!(outcome.next, Some(charged));
            }
        }
        let expected = a.used(s, at).saturating_add(u64::from(cost));
        let used = a.used(charged, at);
        let full = saturation(&a, at);
        if expected <= full {
            prop_assert_eq!(used, expected, "{:?}", a);
        } else {
            // Saturated: the layout is full, and nothing is charged beyond the cost. (A
            // sliding window counter's full current count still has its previous window's
            // weighted count on top.)
            prop_assert!(used >= full && used <= expected, "{:?}: {} of {}", a, used, expected);
        }
        prop_assert!(admits(&a, charged, now) <= admits(&a, s, now));
    }

    /// `used` reads back exactly what `with_used` wrote, beyond the limit too (saturating
    /// only where the layout is full).
    #[test]
    fn used_reads_back_with_used(a in packed(), now in now(), used in prop_oneof![0u64..100, 0u64..100_000]) {
        let at = Nanos::new(now);
        let state = a.with_used(at, used);
        prop_assert_eq!(a.used(state, at), used.min(saturation(&a, at)), "{:?}", a);
        prop_assert_eq!(a.is_idle(state, at), used == 0);
    }

    /// What a store that forwards an undone take as a refund relies on: for every pair of
    /// the six algorithms, a state with a take of `cost`, converted to the other
    /// parameters and refunded `cost` at the same instant, is the state converted without
    /// the take: the same permits used and the same admissions, now and at any later time
    /// (below the saturation of the new layout).
    #[test]
    fn a_converted_take_refunded_is_the_conversion_without_it(
        from in any_algorithm(), to in any_algorithm(), trace in trace(), now in now(),
        cost in 1u32..8, charged in 0u32..60, later in 0u64..200_000_000_000,
    ) {
        let at = Nanos::new(now);
        let s = from.charge(&from.state_at(&trace, now), at, charged);
        let cost = cost.min(from.max_cost() as u32);
        let Some(taken) = from.take(&s, at, cost) else { return Ok(()) };
        prop_assume!(from.used(&taken, at) < to.saturation(at));
        let plain = to.convert(&from, &s, at);
        let refunded = to.refund(&to.convert(&from, &taken, at), at, cost);
        for t in [now, now.saturating_add(1), now.saturating_add(later)] {
            let t_at = Nanos::new(t);
            prop_assert_eq!(
                to.used(&refunded, t_at), to.used(&plain, t_at),
                "{:?} -> {:?} at +{}", from, to, t - now
            );
            prop_assert_eq!(to.admits(&refunded, t), to.admits(&plain, t), "{:?} -> {:?} at +{}", from, to, t - now);
        }
    }

    /// The pure log transition over a plain vector (the executor std and firmware use)
    /// agrees with the reference model; a refund at the take's time and an undo remove
    /// exactly the take.
    #[test]
    fn the_pure_log_agrees_with_the_model(
        limit in 1u64..20, w in 0usize..4, steps in prop::collection::vec((0u64..2_000_000, 0u32..4, any::<bool>()), 1..60),
        keep in any::<bool>(),
    ) {
        let log = SlidingWindowLog::new(limit, Nanos::new(WINDOWS[w])).unwrap();
        let mut model = SlidingWindowLogModel::new(&log);
        let mut stamps: Vec<u64> = Vec::new();
        let mut now = 0u64;
        for (step, cost, undo) in steps {
            now += step;
            let at = Nanos::new(now);
            let ours: Result<Decision, InsufficientCapacity> = log.decide(&stamps[..], at, cost).map(|out| {
                if let Some(stamp) = out.record {
                    let before = stamps.clone();
                    stamps.extend(std::iter::repeat(stamp).take(cost as usize));
                    if undo {
                        let (start, end) = log.undo(&stamps[..], stamp, cost);
                        stamps.drain(start as usize..end as usize);
                        assert_eq!(stamps, before);
                        let back = log.refund(&stamps[..], at, 0);
                        assert_eq!(back, 0);
                        stamps.extend(std::iter::repeat(stamp).take(cost as usize));
                        let back = log.refund(&stamps[..], at, cost) as usize;
                        assert_eq!(back, cost as usize);
                        stamps.truncate(stamps.len() - back);
                        assert_eq!(&stamps, &before);
                        stamps.extend(std::iter::repeat(stamp).take(cost as usize));
                    }
                }
                out.decision
            });
            prop_assert_eq!(ours, model.check(now, cost, true), "at {}", now);
            prop_assert_eq!(log.used(&stamps[..], at), log.ceiling().min(stamps.iter().filter(|&&t| log.in_window(t, now)).count() as u64));
            let expired = log.expired(&stamps[..], at) as usize;
            prop_assert!(stamps[..expired].iter().all(|&t| !log.in_window(t, now)));
            // What a write drops is out of the window and never among the newest `limit`,
            // so every later decision (the model's) is unchanged by dropping it.
            if keep {
                let drop = log.droppable(&stamps[..], at) as usize;
                prop_assert!(drop <= expired && stamps.len() - drop >= (limit as usize).min(stamps.len()));
                stamps.drain(..drop);
            }
        }
    }
}

/// The most permits a state of `a` can count at `at`, from its layout alone: a window's
/// full packed count, a bucket's debt up to the end of `u64` time. (Not derived from
/// `with_used`, so a conversion that caps below it fails the tests above.)
fn saturation(a: &PackedAlgorithm, at: Nanos) -> u64 {
    match a {
        PackedAlgorithm::FixedWindow(f) => f.unpack(u64::MAX).1,
        PackedAlgorithm::SlidingWindowCounter(f) => f.unpack(u64::MAX).2,
        PackedAlgorithm::Gcra(_)
        | PackedAlgorithm::TokenBucket(_)
        | PackedAlgorithm::LeakyBucket(_) => a.used(u64::MAX, at),
    }
}

/// Any of the six algorithms, with small limits.
fn any_algorithm() -> impl Strategy<Value = Any> {
    prop_oneof![
        5 => packed().prop_map(Any::Packed),
        1 => (1u64..40, 0usize..WINDOWS.len()).prop_map(|(limit, w)| {
            Any::Log(SlidingWindowLog::new(limit, Nanos::new(WINDOWS[w])).unwrap())
        }),
    ]
}

/// A state of any of the six algorithms: a packed word, or a log's stamps.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Word(u64),
    Log(Vec<u64>),
}

/// Any of the six algorithms, with the operations a store runs on a state: every one the
/// core's (`decide`, `refund`, `used`, `rescale`, and the log's pure functions).
#[derive(Copy, Clone, Debug)]
enum Any {
    Packed(PackedAlgorithm),
    Log(SlidingWindowLog),
}

impl Any {
    fn max_cost(&self) -> u64 {
        match self {
            Any::Packed(a) => a.max_cost(),
            Any::Log(l) => l.max_cost(),
        }
    }

    fn fresh(&self) -> State {
        match self {
            Any::Packed(_) => State::Word(0),
            Any::Log(_) => State::Log(Vec::new()),
        }
    }

    /// `cost` taken at `at` if admitted: the state written (as an executor keeps it).
    fn take(&self, s: &State, at: Nanos, cost: u32) -> Option<State> {
        match (self, s) {
            (Any::Packed(a), State::Word(w)) => a.decide(*w, at, cost).ok()?.next.map(State::Word),
            (Any::Log(l), State::Log(log)) => {
                let stamp = l.decide(&log[..], at, cost).ok()?.record?;
                let mut log = log.clone();
                log.extend(std::iter::repeat(stamp).take(cost as usize));
                Some(State::Log(l.kept(log, at)))
            }
            _ => unreachable!("a state of another kind"),
        }
    }

    /// A state reached by a random trace ending at `now` (as `state_at`).
    fn state_at(&self, trace: &[(u64, u32)], now: u64) -> State {
        let mut state = self.fresh();
        let mut t = now.saturating_sub(trace.iter().map(|s| s.0).sum());
        for &(step, cost) in trace {
            t = (t + step).min(now);
            let cost = cost.min(self.max_cost().min(u64::from(u32::MAX)) as u32);
            if let Some(next) = self.take(&state, Nanos::new(t), cost) {
                state = next;
            }
        }
        state
    }

    fn charge(&self, s: &State, at: Nanos, cost: u32) -> State {
        match (self, s) {
            (Any::Packed(a), State::Word(w)) => State::Word(a.charge(*w, at, cost)),
            (Any::Log(l), State::Log(log)) => {
                let (stamp, count) = l.charge(&log[..], at, cost);
                let mut log = log.clone();
                log.extend(std::iter::repeat(stamp).take(count as usize));
                State::Log(l.kept(log, at))
            }
            _ => unreachable!("a state of another kind"),
        }
    }

    fn refund(&self, s: &State, at: Nanos, cost: u32) -> State {
        match (self, s) {
            (Any::Packed(a), State::Word(w)) => State::Word(a.refund(*w, at, cost)),
            (Any::Log(l), State::Log(log)) => {
                let back = l.refund(&log[..], at, cost) as usize;
                let log = log[..log.len() - back].to_vec();
                State::Log(l.kept(log, at))
            }
            _ => unreachable!("a state of another kind"),
        }
    }

    fn used(&self, s: &State, at: Nanos) -> u64 {
        match (self, s) {
            (Any::Packed(a), State::Word(w)) => a.used(*w, at),
            (Any::Log(l), State::Log(log)) => l.used(&log[..], at),
            _ => unreachable!("a state of another kind"),
        }
    }

    /// Where a conversion into this algorithm saturates at `at`.
    fn saturation(&self, at: Nanos) -> u64 {
        match self {
            Any::Packed(a) => saturation(a, at),
            Any::Log(l) => l.ceiling(),
        }
    }

    /// `s`, under `from`, converted to this algorithm at `at`: `rescale` between words, the
    /// stamps as they are between logs, `used` / `with_used` across.
    fn convert(&self, from: &Any, s: &State, at: Nanos) -> State {
        match (from, s, self) {
            (Any::Packed(f), State::Word(w), Any::Packed(t)) => State::Word(t.rescale(f, *w, at)),
            (Any::Log(f), State::Log(log), Any::Log(t)) => {
                let drop = t.rescale_from(f, &log[..], at) as usize;
                State::Log(log[drop..].to_vec())
            }
            (_, _, Any::Packed(t)) => State::Word(t.with_used(at, from.used(s, at))),
            (_, _, Any::Log(l)) => {
                let (stamp, count) = l.with_used(at, from.used(s, at));
                State::Log(vec![stamp; count as usize])
            }
        }
    }

    /// How many cost-1 requests in a row `s` admits at `at`.
    fn admits(&self, s: &State, at: u64) -> u64 {
        match (self, s) {
            (Any::Packed(a), State::Word(w)) => admits(a, *w, at),
            (Any::Log(l), State::Log(_)) => {
                let mut s = s.clone();
                let mut n = 0;
                while n <= l.limit() {
                    match self.take(&s, Nanos::new(at), 1) {
                        Some(next) => {
                            s = next;
                            n += 1;
                        }
                        None => break,
                    }
                }
                n
            }
            _ => unreachable!("a state of another kind"),
        }
    }
}

/// What an executor keeps of a log after a write: the `droppable` oldest entries go.
trait Kept {
    fn kept(&self, log: Vec<u64>, at: Nanos) -> Vec<u64>;
}

impl Kept for SlidingWindowLog {
    fn kept(&self, mut log: Vec<u64>, at: Nanos) -> Vec<u64> {
        let drop = self.droppable(&log[..], at) as usize;
        log.drain(..drop);
        log
    }
}

/// Pinned: a lowered limit and its rollback, with a refund in between, for every window
/// algorithm and from GCRA (the permits used are carried whole both ways).
#[test]
fn a_lowered_limit_refunded_and_rolled_back_keeps_every_permit_used() {
    let at = Nanos::from_secs(1_700_000_007);
    let minute = Nanos::from_secs(60);
    let build = |c: AlgorithmConfig| match c.build().unwrap() {
        AnyAlgorithm::Packed(p) => Any::Packed(p),
        AnyAlgorithm::Log(l) => Any::Log(l),
    };
    let kinds = |limit: u64| {
        [
            AlgorithmConfig::Gcra {
                limit,
                period: minute,
                burst: limit,
            },
            AlgorithmConfig::FixedWindow {
                limit,
                window: minute,
            },
            AlgorithmConfig::SlidingWindowCounter {
                limit,
                window: minute,
            },
            AlgorithmConfig::SlidingWindowLog {
                limit,
                window: minute,
            },
        ]
    };
    for high in kinds(100) {
        for to in kinds(10).into_iter().skip(1) {
            let (high, to) = (build(high), build(to));
            let mut s = high.fresh();
            for _ in 0..100 {
                s = high.take(&s, at, 1).unwrap();
            }
            let lowered = to.refund(&to.convert(&high, &s, at), at, 1);
            assert_eq!(to.used(&lowered, at), 99, "{high:?} -> {to:?}");
            assert_eq!(to.admits(&lowered, at.as_u64()), 0);
            let back = high.convert(&to, &lowered, at);
            assert_eq!(
                high.admits(&back, at.as_u64()),
                1,
                "{high:?} -> {to:?} -> back"
            );
        }
    }
}

/// A cost the leaky bucket's queue cannot hold is refused outright, in every executor
/// that runs the core (here: the pure transition and `AnyAlgorithm`).
#[test]
fn a_leaky_bucket_refuses_what_its_queue_cannot_hold() {
    let shaper = AlgorithmConfig::LeakyBucket {
        amount: 10,
        period: Nanos::from_secs(1),
        queue: 0,
    }
    .build()
    .unwrap();
    assert_eq!(shaper.max_cost(), 1);
    let AnyAlgorithm::Packed(p) = shaper else {
        unreachable!()
    };
    assert_eq!(
        p.decide(0, Nanos::ZERO, u32::MAX),
        Err(InsufficientCapacity { max_cost: 1 })
    );
}

/// Pinned conversions between algorithm families (the table in `PackedAlgorithm::rescale`).
#[test]
fn pinned_conversions() {
    let at = Nanos::from_secs(100);
    let build = |c: AlgorithmConfig| match c.build().unwrap() {
        AnyAlgorithm::Packed(p) => p,
        AnyAlgorithm::Log(_) => unreachable!(),
    };
    let gcra = build(AlgorithmConfig::Gcra {
        limit: 10,
        period: Nanos::from_secs(1),
        burst: 10,
    });
    let slower = build(AlgorithmConfig::Gcra {
        limit: 5,
        period: Nanos::from_secs(1),
        burst: 5,
    });
    let fixed = build(AlgorithmConfig::FixedWindow {
        limit: 10,
        window: Nanos::from_secs(60),
    });
    // Six permits at 100 ms each: TAT = now + 600 ms.
    let mut s = 0;
    for _ in 0..6 {
        s = gcra.decide(s, at, 1).unwrap().next.unwrap();
    }
    assert_eq!(s, at.as_u64() + 600_000_000);
    // Same debt in permits at 200 ms each: 1.2 s, over the new burst: denied until repaid.
    let moved = slower.rescale(&gcra, s, at);
    assert_eq!(moved, at.as_u64() + 1_200_000_000);
    assert_eq!(admits(&slower, moved, at.as_u64()), 0);
    assert_eq!(admits(&slower, moved, at.as_u64() + 400_000_000), 1);
    // To a fixed window: six used in the current minute.
    let windowed = fixed.rescale(&gcra, s, at);
    assert_eq!(fixed.used(windowed, at), 6);
    assert_eq!(admits(&fixed, windowed, at.as_u64()), 4);
    // And back: six permits of debt at 100 ms.
    assert_eq!(
        gcra.rescale(&fixed, windowed, at),
        at.as_u64() + 600_000_000
    );
}

/// A refund dated in a window older than the stored one gives nothing back: that window's
/// permits have already come back by themselves, and the newer window's count is another
/// take's.
#[test]
fn a_fixed_window_refund_from_an_earlier_window_gives_nothing_back() {
    let second = Nanos::from_secs(1);
    let window = FixedWindow::new(1, second).unwrap();
    let at = |ms| Nanos::from_millis(ms);
    let first = window.decide(0, at(500), 1).unwrap().next.unwrap();
    // The next window starts fresh: its one permit is taken.
    let state = window.decide(first, at(1200), 1).unwrap().next.unwrap();
    // The take of 0.5 s is refunded (dated 0.5 s): window 0 no longer counts.
    let refunded = window.refund(state, at(500), 1);
    assert_eq!(refunded, state);
    assert!(
        !window
            .decide(refunded, at(1300), 1)
            .unwrap()
            .decision
            .allowed
    );
}

/// A charge larger than a window's packed counter saturates the count and never spills
/// into the window index: the key is exhausted for the rest of its window, fresh in the next.
#[test]
fn a_huge_charge_saturates_the_count_and_keeps_the_window() {
    let second = Nanos::from_secs(1);
    let at = Nanos::from_millis(1_700_000_000_300);
    let next = Nanos::new(at.as_u64() + 1_000_000_000);
    let fixed = FixedWindow::new(10, second).unwrap();
    let charged = fixed.charge(0, at, u32::MAX);
    assert_eq!(
        fixed.unpack(charged),
        (at.as_u64() / 1_000_000_000, fixed.max_count())
    );
    assert_eq!(fixed.used(charged, at), fixed.max_count());
    assert!(!fixed.decide(charged, at, 1).unwrap().decision.allowed);
    assert!(fixed.decide(charged, next, 1).unwrap().decision.allowed);
    let counter = SlidingWindowCounter::new(10, second).unwrap();
    let charged = counter.charge(0, at, u32::MAX);
    assert_eq!(
        counter.unpack(charged),
        (at.as_u64() / 1_000_000_000, 0, counter.max_count())
    );
    assert!(!counter.decide(charged, next, 1).unwrap().decision.allowed);
    let after = Nanos::new(next.as_u64() + 1_000_000_000);
    assert!(counter.decide(charged, after, 1).unwrap().decision.allowed);
}

/// An undo after part of the same take was already refunded never goes below the state
/// before the take: the take's permits are given back once, not once per give-back.
#[test]
fn an_undo_after_a_partial_refund_stops_at_the_state_before_the_take() {
    let now = Nanos::from_secs(100);
    let gcra = Gcra::per_second(1).burst(5).build().unwrap();
    let leaky = LeakyBucket::new(1, Nanos::from_secs(1), 4).unwrap();
    let buckets: [(&str, &dyn Algorithm); 2] = [("gcra", &gcra), ("leaky", &leaky)];
    for (name, a) in buckets {
        let before = a.decide(0, now, 1).unwrap().next.unwrap();
        let after = a.decide(before, now, 2).unwrap().next.unwrap();
        assert_eq!(after, now.as_u64() + 3_000_000_000, "{name}");
        // One of the take's two permits is refunded, then the whole take undone.
        let state = a.refund(after, now, 1);
        assert_eq!(a.undo(state, before, after, 2), before, "{name}");
        assert_eq!(a.used(a.undo(state, before, after, 2), now), 1, "{name}");
    }
}

/// A bucket's debt moved to another interval is rounded up to the nanosecond (toward the
/// stricter side): a fraction of a nanosecond of debt is still debt.
#[test]
fn a_rescaled_debt_is_rounded_up_to_the_nanosecond() {
    let now = Nanos::from_secs(100);
    let (slow, fast) = (
        PackedAlgorithm::from(Gcra::from_interval(3, 10).unwrap()),
        PackedAlgorithm::from(Gcra::from_interval(2, 10).unwrap()),
    );
    // 1 ns of debt at 3 ns per permit is 2/3 ns at 2 ns per permit: 1 ns, not 0.
    let owed = now.as_u64() + 1;
    assert_eq!(fast.rescale(&slow, owed, now), owed);
    assert!(!fast.is_idle(fast.rescale(&slow, owed, now), now));
    // 2 ns at 3 ns per permit: 4/3 ns, rounded up to 2.
    assert_eq!(fast.rescale(&slow, now.as_u64() + 2, now), now.as_u64() + 2);
}

/// A sliding counter's undo after the window rolled once takes the cost off `prev`, where
/// the take is now counted (exact, as documented), not off nothing.
#[test]
fn a_sliding_counter_undo_after_one_roll_takes_the_cost_off_prev() {
    let counter = SlidingWindowCounter::new(10, Nanos::from_secs(1)).unwrap();
    let at = |ms| Nanos::from_millis(ms);
    let after = counter.decide(0, at(900), 4).unwrap().next.unwrap();
    // Another caller in the next window: the take of 4 is now the previous window's count.
    let state = counter.decide(after, at(1100), 1).unwrap().next.unwrap();
    assert_eq!(counter.unpack(state), (1, 4, 1));
    let undone = counter.undo(state, 0, after, 4);
    assert_eq!(counter.unpack(undone), (1, 0, 1));
    assert_eq!(counter.used(undone, at(1100)), 1);
    // Two rolls later the take no longer counts: nothing to give back.
    let later = counter.decide(after, at(2100), 1).unwrap().next.unwrap();
    assert_eq!(counter.undo(later, 0, after, 4), later);
}

/// A sliding counter's `used` rounds the weighted estimate up, so a conversion carries a
/// permit that still half counts instead of treating the key as fresh.
#[test]
fn a_sliding_counter_counts_a_partly_slid_out_permit_as_used() {
    let second = Nanos::from_secs(1);
    let counter = SlidingWindowCounter::new(10, second).unwrap();
    let at = |ms| Nanos::from_millis(ms);
    let state = counter.decide(0, at(900), 1).unwrap().next.unwrap();
    // At 1.5 s the permit of 0.9 s weighs 1/2: counted as one whole permit.
    assert_eq!(counter.used(state, at(1500)), 1);
    let fixed = PackedAlgorithm::from(FixedWindow::new(10, second).unwrap());
    let moved = fixed.rescale(&PackedAlgorithm::from(counter), state, at(1500));
    assert_eq!(fixed.used(moved, at(1500)), 1);
    assert_eq!(admits(&fixed, moved, at(1500).as_u64()), 9);
}

/// A log's refund removes only permits still in the window: those that slid out came back
/// by themselves, and removing them would let a late caller (older `now`) past the limit.
#[test]
fn a_log_refund_gives_back_only_what_is_still_in_the_window() {
    let log = SlidingWindowLog::new(2, Nanos::from_secs(1)).unwrap();
    let stamps = [0, 100_000_000];
    assert_eq!(log.refund(&stamps[..], Nanos::from_millis(1050), 2), 1);
    assert_eq!(log.refund(&stamps[..], Nanos::from_millis(1100), 2), 0);
    assert_eq!(log.refund(&stamps[..], Nanos::from_millis(500), 1), 1);
}

/// A log's charge records at most its ceiling, `L + EXCESS`: a huge cost cannot make an
/// executor append billions of stamps.
#[test]
fn a_log_charge_records_at_most_the_ceiling() {
    let log = SlidingWindowLog::new(10, Nanos::from_secs(60)).unwrap();
    let now = Nanos::from_secs(5);
    assert_eq!(
        log.charge(&[][..], now, u32::MAX),
        (now.as_u64(), 10 + SlidingWindowLog::EXCESS)
    );
    let stamps = [1_000, 7_000_000_000];
    assert_eq!(log.charge(&stamps[..], now, 3), (7_000_000_000, 3));
}
