//! [`Differential`]: one trace through core's executors and the reference model, side by
//! side; and [`constructed`], the agreement of direct constructors and configs.

use tollgate_core::{
    Algorithm, AlgorithmConfig, AnyAlgorithm, AnyLimiter, ConfigError, Nanos, PackedAlgorithm,
    StateCell,
};

use crate::{check_decision, Answer, Step};

/// The algorithm `direct` built, if it built, after asserting that `config` (its
/// `AlgorithmConfig` spelling, when it has one) built the very same algorithm or failed with
/// the very same error.
pub fn constructed<A>(direct: Result<A, ConfigError>, config: Option<AlgorithmConfig>) -> Option<A>
where
    A: Copy + Into<AnyAlgorithm> + core::fmt::Debug,
{
    if let Some(config) = config {
        let via_config = config.build();
        let direct_any = direct.map(Into::into);
        assert_eq!(
            direct_any, via_config,
            "constructor and {config:?} disagree"
        );
    }
    direct.ok()
}

/// A single-word algorithm run three ways on one trace: a [`StateCell`] with the algorithm,
/// an [`AnyLimiter`] with it as a [`PackedAlgorithm`], and the reference model.
pub struct Differential<A, M> {
    algorithm: A,
    cell: StateCell,
    any: AnyLimiter<0>,
    model: M,
}

impl<A, M> Differential<A, M>
where
    A: Algorithm + Copy + Into<PackedAlgorithm>,
    M: FnMut(u64, u32, bool) -> Answer,
{
    /// Fresh state for `algorithm`; `model` is its reference model's `check`.
    pub fn new(algorithm: A, model: M) -> Differential<A, M> {
        let packed: PackedAlgorithm = algorithm.into();
        Differential {
            algorithm,
            cell: StateCell::new(),
            any: AnyLimiter::new(AnyAlgorithm::Packed(packed))
                .expect("a packed algorithm needs no ring"),
            model,
        }
    }

    /// Runs `steps`, asserting at each one:
    /// - the cell's answer equals the reference model's and the `AnyLimiter`'s;
    /// - a decision satisfies [`check_decision`]; an `InsufficientCapacity` happens exactly
    ///   when `cost > max_cost` and names `max_cost`;
    /// - a peek, a deny and a cost-0 check leave the state untouched;
    /// - a state that `is_idle` at some instant answers like a fresh key then and later.
    pub fn run(&mut self, steps: &[Step]) {
        let limit = self.algorithm.limit();
        let max_cost = self.algorithm.max_cost();
        let mut previous: Option<u64> = None;
        for (now, cost, commit) in Step::timeline(steps) {
            let before = self.cell.load();
            let mut idle_at = vec![now];
            idle_at.extend(previous.filter(|&p| p <= now));
            let fresh = idle_at
                .iter()
                .any(|&t| self.algorithm.is_idle(before, Nanos::new(t)))
                .then(|| self.fresh_answer(now, cost, commit));

            let got = if commit {
                self.cell.check_at(&self.algorithm, Nanos::new(now), cost)
            } else {
                self.cell.peek_at(&self.algorithm, Nanos::new(now), cost)
            };
            let expected = (self.model)(now, cost, commit);
            assert_eq!(
                got, expected,
                "cell vs reference model at now={now} cost={cost} commit={commit} state={before:#x}"
            );
            let any = if commit {
                self.any.check_n_at(Nanos::new(now), cost)
            } else {
                self.any.peek_n_at(Nanos::new(now), cost)
            };
            assert_eq!(any, got, "AnyLimiter vs cell at now={now} cost={cost}");
            if let Some(fresh) = fresh {
                assert_eq!(
                    got, fresh,
                    "idle state {before:#x} answered unlike a fresh key at now={now} cost={cost}"
                );
            }

            match got {
                Ok(decision) => {
                    assert!(
                        u64::from(cost) <= max_cost,
                        "admitted a cost above max_cost"
                    );
                    check_decision(&decision, limit);
                    if !(commit && decision.allowed && cost > 0) {
                        assert_eq!(self.cell.load(), before, "a read-only step wrote");
                    }
                }
                Err(e) => {
                    assert!(
                        u64::from(cost) > max_cost,
                        "InsufficientCapacity for {cost}"
                    );
                    assert_eq!(e.max_cost, max_cost);
                    assert_eq!(self.cell.load(), before, "an error wrote");
                }
            }
            previous = Some(now);
        }
    }

    fn fresh_answer(&self, now: u64, cost: u32, commit: bool) -> Answer {
        let outcome = if commit {
            self.algorithm.decide(0, Nanos::new(now), cost)
        } else {
            self.algorithm.peek(0, Nanos::new(now), cost)
        };
        outcome.map(|o| o.decision)
    }
}
