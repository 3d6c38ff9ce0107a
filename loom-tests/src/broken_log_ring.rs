//! [`BrokenLogRing`]: a deliberately wrong sliding-log ring, to prove the log models can
//! fail.

use loom::sync::atomic::{AtomicU64, Ordering};
use tollgate_core::{Decision, InsufficientCapacity, Nanos, SlidingWindowLog};

use crate::{Answer, FinalState, Op, Subject};

/// `LogRing` without its writer claim: an admission reads the head and the slots, decides,
/// then writes its slots and stores the new head, with nothing stopping another admission
/// that read the same head in between. Two such admissions both fit, so more than `L`
/// permits land in one window; a model run against it must panic.
///
/// Its decisions are exact in `allowed`, `limit` and `remaining` only (the timings are
/// left at zero): the models catch it on the admission bound before comparing answers.
#[derive(Debug)]
pub struct BrokenLogRing<const N: usize> {
    log: SlidingWindowLog,
    head: AtomicU64,
    slots: [AtomicU64; N],
    probes: Vec<u64>,
}

impl<const N: usize> BrokenLogRing<N> {
    /// A fresh broken ring for `log`, read back at `probes` when the model ends.
    pub fn new(log: SlidingWindowLog, probes: Vec<u64>) -> BrokenLogRing<N> {
        BrokenLogRing {
            log,
            head: AtomicU64::new(0),
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            probes,
        }
    }

    fn decide(&self, now: u64, cost: u32, commit: bool) -> Answer {
        let limit = self.log.limit().min(N as u64);
        let cost = u64::from(cost);
        if cost > limit {
            return Err(InsufficientCapacity { max_cost: limit }.into());
        }
        // SeqCst everywhere: the bug under test is the missing claim, not a weak ordering.
        let h = self.head.load(Ordering::SeqCst);
        let live = h.min(limit);
        let slot = |seq: u64| &self.slots[(seq % N as u64) as usize];
        let stamps: Vec<u64> = (h - live..h)
            .map(|seq| slot(seq).load(Ordering::SeqCst))
            .collect();
        let in_window = stamps
            .iter()
            .filter(|&&t| self.log.in_window(t, now))
            .count() as u64;
        if in_window + cost > limit {
            return Ok(Decision::deny(
                limit,
                limit - in_window,
                Nanos::ZERO,
                Nanos::ZERO,
            ));
        }
        if commit && cost > 0 {
            let stamp = stamps.last().map_or(now, |&newest| newest.max(now));
            for seq in h..h + cost {
                slot(seq).store(stamp, Ordering::SeqCst);
            }
            self.head.store(h + cost, Ordering::SeqCst);
        }
        Ok(Decision::allow(
            limit,
            limit - in_window - cost,
            Nanos::ZERO,
        ))
    }
}

impl<const N: usize> Subject for BrokenLogRing<N> {
    fn apply(&self, op: Op) -> Answer {
        self.decide(op.now().as_u64(), op.cost(), op.commits())
    }

    fn final_state(&self) -> FinalState {
        FinalState::Probes(
            self.probes
                .iter()
                .map(|&t| self.decide(t, 1, false))
                .collect(),
        )
    }
}
