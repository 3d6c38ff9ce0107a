//! Shared support of the policy store tests: a deliberately plain reference [`Store`] (one
//! mutex over a map of states, run with the core's operations, states tagged by version and
//! converted lazily on read), a rule file using every algorithm and both partitions, and a
//! deterministic generator.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tollgate::engine::LogView;
use tollgate::policy::{
    AdaptivePenalty, Metered, Op, PenaltyConfig, Plan, PlannedTier, Policy, PolicyCheck, Store,
    TierOutcome,
};
use tollgate::{Algorithm, AnyAlgorithm, Decision, InsufficientCapacity, ManualClock, Nanos};
/// A key's state in the map store: a packed word or a log.
#[derive(Clone, Debug)]
enum State {
    Word(u64),
    Log(VecDeque<u64>),
}

/// The deque as the core's log view.
struct Stamps<'a>(&'a VecDeque<u64>);

impl LogView for Stamps<'_> {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn stamp(&self, i: u64) -> u64 {
        self.0[i as usize]
    }
}

/// A plain store: every state in one map behind one mutex, keyed by (rule, tier, key),
/// each tagged with the algorithm it was written under (its version) and converted with
/// the core's operations when a reload changed the tier. Checks are all or nothing
/// because the whole plan is decided under the lock.
#[derive(Debug, Default)]
pub(crate) struct MapStore {
    states: Mutex<HashMap<Key, Tagged>>,
}

type Key = (String, String, u64);

/// A state and the algorithm (version) it was written under.
#[derive(Clone, Debug)]
struct Tagged {
    version: u64,
    algorithm: AnyAlgorithm,
    state: State,
}

fn key(p: &PlannedTier<'_>) -> Key {
    (p.rule.name().to_owned(), p.tier.name().to_owned(), p.key)
}

/// The state of `p`'s key, converted to `p`'s tier if it was written under another
/// version: the core's rescale (or used / with_used across the word and log kinds).
fn current(states: &HashMap<Key, Tagged>, p: &PlannedTier<'_>, now: Nanos) -> State {
    let new = p.tier.algorithm();
    let Some(tagged) = states.get(&key(p)) else {
        return fresh(new);
    };
    if tagged.version == p.tier.version() {
        return tagged.state.clone();
    }
    let used = match (&tagged.algorithm, &tagged.state, new) {
        (AnyAlgorithm::Packed(old), State::Word(w), AnyAlgorithm::Packed(new)) => {
            return State::Word(new.rescale(old, *w, now))
        }
        (AnyAlgorithm::Log(old), State::Log(log), AnyAlgorithm::Log(new)) => {
            let drop = new.rescale_from(old, &Stamps(log), now) as usize;
            return State::Log(log.iter().skip(drop).copied().collect());
        }
        (AnyAlgorithm::Packed(old), State::Word(w), _) => old.used(*w, now),
        (AnyAlgorithm::Log(old), State::Log(log), _) => old.used(&Stamps(log), now),
        _ => 0,
    };
    match new {
        AnyAlgorithm::Packed(a) => State::Word(a.with_used(now, used)),
        AnyAlgorithm::Log(l) => {
            let (stamp, count) = l.with_used(now, used);
            State::Log(std::iter::repeat_n(stamp, count as usize).collect())
        }
    }
}

/// What every store keeps of a log after a write (an admitted take, a charge, a refund):
/// the core's `droppable` oldest entries go (out of the window, or beyond the ceiling).
fn kept(l: &tollgate::SlidingWindowLog, mut log: VecDeque<u64>, now: Nanos) -> VecDeque<u64> {
    let drop = l.droppable(&Stamps(&log), now) as usize;
    log.drain(..drop);
    log
}

fn tagged(p: &PlannedTier<'_>, state: State) -> Tagged {
    Tagged {
        version: p.tier.version(),
        algorithm: *p.tier.algorithm(),
        state,
    }
}

fn fresh(algorithm: &AnyAlgorithm) -> State {
    match algorithm {
        AnyAlgorithm::Packed(_) => State::Word(0),
        AnyAlgorithm::Log(_) => State::Log(VecDeque::new()),
    }
}

/// Decides `p` on `state`; the state to write if admitted.
fn decide(
    p: &PlannedTier<'_>,
    state: &State,
    now: Nanos,
) -> Result<(Decision, Option<State>), InsufficientCapacity> {
    match (p.tier.algorithm(), state) {
        (AnyAlgorithm::Packed(a), State::Word(w)) => {
            let out = a.decide(*w, now, p.cost)?;
            Ok((out.decision, out.next.map(State::Word)))
        }
        (AnyAlgorithm::Log(l), State::Log(log)) => {
            let out = l.decide(&Stamps(log), now, p.cost)?;
            let next = out.record.map(|stamp| {
                let mut log = log.clone();
                log.extend(std::iter::repeat_n(stamp, p.cost as usize));
                State::Log(kept(l, log, now))
            });
            Ok((out.decision, next))
        }
        _ => Err(InsufficientCapacity { max_cost: 0 }),
    }
}

/// A third-party store, written against the public interface only: one `run` over the five
/// operations.
impl Store for MapStore {
    fn run(
        &self,
        op: Op,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        match op {
            Op::Check => self.check(plan, now, outcomes),
            Op::Peek => self.peek(plan, now, outcomes),
            Op::Refund => {
                self.refund(plan, now);
                Ok(())
            }
            Op::Charge => {
                self.charge(plan, now);
                Ok(())
            }
            Op::Reset => {
                let mut states = self.states.lock().unwrap();
                for p in plan {
                    states.remove(&key(p));
                }
                Ok(())
            }
        }
    }
}

impl MapStore {
    fn check(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        let mut states = self.states.lock().unwrap();
        let mut writes = Vec::new();
        let mut all = true;
        for (i, p) in plan.iter().enumerate() {
            let state = current(&states, p, now);
            let (decision, next) = decide(p, &state, now)?;
            outcomes[i].decision = decision;
            all &= decision.allowed;
            if let Some(next) = next {
                writes.push((key(p), tagged(p, next)));
            }
        }
        if all {
            states.extend(writes);
        } else {
            // Admitting tiers report their current state: the request did not count.
            for (i, p) in plan.iter().enumerate() {
                if outcomes[i].decision.allowed {
                    let state = current(&states, p, now);
                    let zero = PlannedTier { cost: 0, ..*p };
                    outcomes[i].decision = decide(&zero, &state, now)?.0;
                }
            }
        }
        Ok(())
    }

    fn peek(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        let states = self.states.lock().unwrap();
        for (i, p) in plan.iter().enumerate() {
            let state = current(&states, p, now);
            outcomes[i].decision = decide(p, &state, now)?.0;
        }
        Ok(())
    }

    fn refund(&self, plan: &Plan<'_>, now: Nanos) {
        let mut states = self.states.lock().unwrap();
        for p in plan {
            if states.contains_key(&key(p)) {
                let mut state = current(&states, p, now);
                match (p.tier.algorithm(), &mut state) {
                    (AnyAlgorithm::Packed(a), State::Word(w)) => *w = a.refund(*w, now, p.cost),
                    (AnyAlgorithm::Log(l), State::Log(log)) => {
                        let back = l.refund(&Stamps(log), now, p.cost) as usize;
                        log.truncate(log.len() - back);
                        *log = kept(l, std::mem::take(log), now);
                    }
                    _ => {}
                }
                states.insert(key(p), tagged(p, state));
            }
        }
    }

    fn charge(&self, plan: &Plan<'_>, now: Nanos) {
        let mut states = self.states.lock().unwrap();
        for p in plan {
            let mut state = current(&states, p, now);
            match (p.tier.algorithm(), &mut state) {
                (AnyAlgorithm::Packed(a), State::Word(w)) => *w = a.charge(*w, now, p.cost),
                (AnyAlgorithm::Log(l), State::Log(log)) => {
                    let (stamp, count) = l.charge(&Stamps(log), now, p.cost);
                    log.extend(std::iter::repeat_n(stamp, count as usize));
                    *log = kept(l, std::mem::take(log), now);
                }
                _ => {}
            }
            states.insert(key(p), tagged(p, state));
        }
    }
}

pub(crate) const RULES: &str = r#"
    [[rules]]
    name = "default"
    tiers = [
        { name = "burst", limit = 5, window = "1s" },
        { name = "minute", limit = 40, window = "1m", algorithm = "fixed_window" },
    ]

    [[rules]]
    name = "vip"
    client = "vip"
    tiers = [
        { name = "vip", limit = 20, window = "1s", algorithm = "token_bucket" },
        { name = "vip-log", limit = 30, window = "10s", algorithm = "sliding_window_log" },
    ]

    [[rules]]
    name = "search"
    endpoint = "/search"
    limit = 8
    window = "10s"
    algorithm = "sliding_window_counter"

    [[rules]]
    name = "upload"
    endpoint = "/upload"
    per = "global"
    limit = 3
    window = "1s"
    algorithm = "leaky_bucket"
"#;

/// A tiny deterministic generator (xorshift), so a failing trace replays.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Every policy feature through a store: reservations, a reload keeping unchanged tiers and
/// converting a changed one, `Metered` over `AdaptivePenalty`, and waiting.
pub(crate) fn exercise_every_feature<S: Store>(store: S) {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000_000));
    let policy = Policy::from_toml(RULES, clock.clone())
        .unwrap()
        .store(store);
    // Reservations.
    let reservation = policy.reserve("vip", "/", 10).unwrap();
    assert!(reservation.allowed());
    assert_eq!(reservation.settle(4).unwrap().remaining(), 16);
    // A reload keeps state where the tier is unchanged (the store keys by names), and a
    // changed tier's states carry their used permits, converted on their next check by
    // their version tag: 4 of 8 used on /search, lowered to 3 and to a fixed window.
    for _ in 0..4 {
        assert!(policy.allow("b", "/search", 1).unwrap().allowed());
    }
    policy
        .reload_toml(&RULES.replace(
            "limit = 8
    window = \"10s\"
    algorithm = \"sliding_window_counter\"",
            "limit = 3
    window = \"10s\"
    algorithm = \"fixed_window\"",
        ))
        .unwrap();
    assert_eq!(policy.peek("vip", "/", 0).unwrap().remaining(), 16);
    let search = policy.allow("b", "/search", 1).unwrap();
    assert!(
        !search.allowed(),
        "4 used of a new 3: exhausted, not a fresh burst"
    );
    assert_eq!(search.tiers().last().unwrap().quota(), 3);
    // Metered and AdaptivePenalty over it.
    let metered = Metered::new(
        AdaptivePenalty::new(
            &policy,
            PenaltyConfig {
                denials: 2,
                period: Nanos::from_secs(60),
                divisor: 2,
                cooldown: Nanos::from_secs(60),
            },
        )
        .unwrap(),
    );
    let admitted = (0..10)
        .filter(|_| metered.allow("a", "/", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 5);
    assert_eq!((metered.allowed(), metered.denied()), (5, 5));
    assert!(metered
        .inner()
        .is_penalized("a", tollgate::Clock::now(&clock)));
    // Waiting: `wait_with` sleeps on a manual clock until admitted.
    let decision = policy
        .wait_with(&tollgate::policy::Request::new("b", "/", 1), |d| {
            clock.advance(d);
        })
        .unwrap();
    assert!(decision.allowed());
}
