//! Reference models: one plain struct per algorithm, written straight from the formulas in
//! the design (no packing, no atomics, `u128` arithmetic), used as oracles by the property
//! tests, the fuzz targets and the loom models.
//!
//! Each model's `check` must return exactly what the packed cell returns for the same
//! parameters and trace. Where a value is easy to get wrong in closed form (the sliding
//! counter's `retry_after`), the model finds it by search instead, so the two computations
//! are independent.

use alloc::collections::VecDeque;

use crate::{
    Algorithm, Decision, FixedWindow, Gcra, InsufficientCapacity, LeakyBucket, Nanos,
    PackedAlgorithm, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

const U64_MAX: u128 = u64::MAX as u128;

/// `x` as a u64, saturating at `u64::MAX` (the models' amounts come from u64 parameters, so
/// this only matters if a model is wrong: it then reports `u64::MAX`, never a wrapped value).
fn saturate(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// Clamps a non-negative span to [`Nanos`].
fn nanos(span: u128) -> Nanos {
    Nanos::new(saturate(span))
}

fn allow(limit: u128, remaining: u128, reset_after: u128) -> Decision {
    Decision::allow(saturate(limit), saturate(remaining), nanos(reset_after))
}

fn deny(limit: u128, remaining: u128, reset_after: u128, retry_after: u128) -> Decision {
    Decision::deny(
        saturate(limit),
        saturate(remaining),
        nanos(reset_after),
        nanos(retry_after),
    )
}

/// GCRA (and token bucket) model: the theoretical arrival time, unbounded.
#[derive(Clone, Debug)]
pub struct GcraModel {
    interval: u128,
    burst: u128,
    tat: u128,
}

impl GcraModel {
    /// A fresh model of `gcra`.
    pub fn new(gcra: &Gcra) -> GcraModel {
        GcraModel {
            interval: u128::from(gcra.emission_interval().as_u64()),
            burst: u128::from(gcra.burst_size()),
            tat: 0,
        }
    }

    /// A fresh model of a token bucket (GCRA with `T = 1/r`, `b = C`).
    pub fn token_bucket(bucket: &TokenBucket) -> GcraModel {
        GcraModel::new(bucket.as_gcra())
    }

    /// Checks `cost` at `now` (a `peek` when `commit` is false).
    pub fn check(
        &mut self,
        now: u64,
        cost: u32,
        commit: bool,
    ) -> Result<Decision, InsufficientCapacity> {
        let (now, cost) = (u128::from(now), u128::from(cost));
        if cost > self.burst {
            return Err(InsufficientCapacity {
                max_cost: saturate(self.burst),
            });
        }
        let tolerance = self.burst * self.interval;
        let tat = self.tat.max(now);
        let new_tat = tat + cost * self.interval;
        let remaining_now = tolerance.saturating_sub(tat - now) / self.interval;
        if new_tat > U64_MAX {
            return Ok(deny(self.burst, remaining_now, tat - now, U64_MAX));
        }
        if new_tat - now <= tolerance {
            if commit && cost > 0 {
                self.tat = new_tat;
            }
            Ok(allow(
                self.burst,
                (tolerance - (new_tat - now)) / self.interval,
                new_tat - now,
            ))
        } else {
            Ok(deny(
                self.burst,
                remaining_now,
                tat - now,
                new_tat - now - tolerance,
            ))
        }
    }
}

/// Leaky bucket model: the time the queue drains, unbounded.
#[derive(Clone, Debug)]
pub struct LeakyBucketModel {
    interval: u128,
    queue: u128,
    drained_at: u128,
}

impl LeakyBucketModel {
    /// A fresh model of `bucket`.
    pub fn new(bucket: &LeakyBucket) -> LeakyBucketModel {
        LeakyBucketModel {
            interval: u128::from(bucket.drain_interval().as_u64()),
            queue: u128::from(bucket.queue_depth()),
            drained_at: 0,
        }
    }

    /// Checks `cost` at `now` (a `peek` when `commit` is false).
    pub fn check(
        &mut self,
        now: u64,
        cost: u32,
        commit: bool,
    ) -> Result<Decision, InsufficientCapacity> {
        let (now, cost) = (u128::from(now), u128::from(cost));
        // What the queue can hold: the one in service plus Q waiting (the bucket's
        // constructor keeps (2Q + 1)·T within the horizon, so its drain time fits).
        let max_cost = self.queue + 1;
        if cost > max_cost {
            return Err(InsufficientCapacity {
                max_cost: saturate(max_cost),
            });
        }
        let drain = cost * self.interval;
        let horizon = self.queue * self.interval;
        let limit = self.queue + 1;
        let start = self.drained_at.max(now);
        let wait = start - now;
        if wait > horizon {
            return Ok(deny(limit, 0, wait, wait - horizon));
        }
        let drained_at = start + drain;
        if drained_at > U64_MAX {
            return Ok(deny(limit, 0, wait, U64_MAX));
        }
        let backlog = drained_at - now;
        let remaining = if backlog <= horizon {
            (horizon - backlog) / self.interval + 1
        } else {
            0
        };
        if commit && cost > 0 {
            self.drained_at = drained_at;
        }
        Ok(allow(limit, remaining, backlog).with_delay(nanos(wait)))
    }
}

/// Fixed window model: the window index and its count, unbounded.
#[derive(Clone, Debug)]
pub struct FixedWindowModel {
    limit: u128,
    window: u128,
    index: u128,
    count: u128,
}

impl FixedWindowModel {
    /// A fresh model of `window`.
    pub fn new(window: &FixedWindow) -> FixedWindowModel {
        FixedWindowModel {
            limit: u128::from(window.limit()),
            window: u128::from(window.window().as_u64()),
            index: 0,
            count: 0,
        }
    }

    /// Checks `cost` at `now` (a `peek` when `commit` is false).
    pub fn check(
        &mut self,
        now: u64,
        cost: u32,
        commit: bool,
    ) -> Result<Decision, InsufficientCapacity> {
        let (now, cost) = (u128::from(now), u128::from(cost));
        if cost > self.limit {
            return Err(InsufficientCapacity {
                max_cost: saturate(self.limit),
            });
        }
        let current = now / self.window;
        let (index, count) = if self.index >= current {
            (self.index, self.count)
        } else {
            (current, 0)
        };
        let reset_after = (index + 1) * self.window - now.min((index + 1) * self.window);
        if count + cost <= self.limit {
            if commit && cost > 0 {
                (self.index, self.count) = (index, count + cost);
            }
            Ok(allow(self.limit, self.limit - count - cost, reset_after))
        } else {
            Ok(deny(
                self.limit,
                self.limit - count,
                reset_after,
                reset_after,
            ))
        }
    }
}

/// Sliding window counter model. `retry_after` is found by searching time, not by formula.
#[derive(Clone, Debug)]
pub struct SlidingWindowCounterModel {
    limit: u128,
    window: u128,
    index: u128,
    prev: u128,
    curr: u128,
}

impl SlidingWindowCounterModel {
    /// A fresh model of `counter`.
    pub fn new(counter: &SlidingWindowCounter) -> SlidingWindowCounterModel {
        SlidingWindowCounterModel {
            limit: u128::from(counter.limit()),
            window: u128::from(counter.window().as_u64()),
            index: 0,
            prev: 0,
            curr: 0,
        }
    }

    /// `(index, prev, curr, elapsed)` in force at `now`.
    fn rolled(&self, now: u128) -> (u128, u128, u128, u128) {
        let current = now / self.window;
        if self.index > current {
            (self.index, self.prev, self.curr, 0)
        } else if self.index == current {
            (
                self.index,
                self.prev,
                self.curr,
                now - current * self.window,
            )
        } else if self.index + 1 == current {
            (current, self.curr, 0, now - current * self.window)
        } else {
            (current, 0, 0, now - current * self.window)
        }
    }

    /// `estimate·W` at `now`, and whether `cost` more fit.
    fn fits(&self, now: u128, cost: u128) -> bool {
        let (_, prev, curr, elapsed) = self.rolled(now);
        prev * (self.window - elapsed) + (curr + cost) * self.window <= self.limit * self.window
    }

    /// Checks `cost` at `now` (a `peek` when `commit` is false).
    pub fn check(
        &mut self,
        now: u64,
        cost: u32,
        commit: bool,
    ) -> Result<Decision, InsufficientCapacity> {
        let (now, cost) = (u128::from(now), u128::from(cost));
        if cost > self.limit {
            return Err(InsufficientCapacity {
                max_cost: saturate(self.limit),
            });
        }
        let (index, prev, curr, elapsed) = self.rolled(now);
        let weighted = prev * (self.window - elapsed);
        let capacity = self.limit * self.window;
        let until = |k: u128| ((index + k) * self.window).saturating_sub(now);
        if self.fits(now, cost) {
            let curr = curr + cost;
            let reset_after = if curr > 0 {
                until(2)
            } else if weighted > 0 {
                until(1)
            } else {
                0
            };
            if commit && cost > 0 {
                (self.index, self.prev, self.curr) = (index, prev, curr);
            }
            let remaining = ((capacity - weighted) / self.window).saturating_sub(curr);
            Ok(allow(self.limit, remaining, reset_after))
        } else {
            let reset_after = if curr > 0 { until(2) } else { until(1) };
            let remaining = (capacity.saturating_sub(weighted) / self.window).saturating_sub(curr);
            // Smallest t > now at which the request fits, if nothing else arrives (the
            // estimate never grows with time, so binary search is sound). Time may pass
            // beyond u64 here: the model is unbounded.
            let (mut lo, mut hi) = (now + 1, (index + 2) * self.window + self.window);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.fits(mid, cost) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            Ok(deny(self.limit, remaining, reset_after, lo - now))
        }
    }
}

/// Sliding window log model: the last `L` admitted timestamps in a `VecDeque`.
#[derive(Clone, Debug)]
pub struct SlidingWindowLogModel {
    limit: usize,
    window: u128,
    log: VecDeque<u128>,
}

impl SlidingWindowLogModel {
    /// A fresh model of `log`.
    pub fn new(log: &SlidingWindowLog) -> SlidingWindowLogModel {
        SlidingWindowLogModel {
            // Saturating: no VecDeque holds more than usize::MAX entries anyway.
            limit: usize::try_from(log.limit()).unwrap_or(usize::MAX),
            window: u128::from(log.window().as_u64()),
            log: VecDeque::new(),
        }
    }

    /// Checks `cost` at `now` (a `peek` when `commit` is false).
    pub fn check(
        &mut self,
        now: u64,
        cost: u32,
        commit: bool,
    ) -> Result<Decision, InsufficientCapacity> {
        let now = u128::from(now);
        let cost = cost as usize;
        if cost > self.limit {
            return Err(InsufficientCapacity {
                max_cost: self.limit as u64,
            });
        }
        let in_window: VecDeque<u128> = self
            .log
            .iter()
            .copied()
            .filter(|&t| t + self.window > now)
            .collect();
        let limit = self.limit as u128;
        let newest = self.log.back().copied();
        let until_out = |t: u128| (t + self.window).saturating_sub(now);
        if in_window.len() + cost <= self.limit {
            let stamp = newest.map_or(now, |t| t.max(now));
            let reset_after = if cost > 0 {
                until_out(stamp)
            } else {
                newest.map_or(0, until_out)
            };
            if commit {
                for _ in 0..cost {
                    self.log.push_back(stamp);
                    if self.log.len() > self.limit {
                        self.log.pop_front();
                    }
                }
            }
            Ok(allow(
                limit,
                limit - (in_window.len() + cost) as u128,
                reset_after,
            ))
        } else {
            // The request fits once enough of the oldest in-window entries have left.
            let must_leave = in_window.len() + cost - self.limit;
            let retry_after = until_out(in_window[must_leave - 1]);
            let reset_after = newest.map_or(0, until_out);
            Ok(deny(
                limit,
                limit - in_window.len() as u128,
                reset_after,
                retry_after,
            ))
        }
    }
}

/// The reference model of any [`PackedAlgorithm`], dispatched by `match`: the oracle for
/// executors that take a runtime-chosen algorithm (keyed tables, `AnyLimiter`).
#[derive(Clone, Debug)]
pub enum PackedModel {
    /// GCRA, or a token bucket (same model).
    Gcra(GcraModel),
    /// Leaky bucket.
    LeakyBucket(LeakyBucketModel),
    /// Fixed window.
    FixedWindow(FixedWindowModel),
    /// Sliding window counter.
    SlidingWindowCounter(SlidingWindowCounterModel),
}

impl PackedModel {
    /// A fresh model of `algorithm`.
    pub fn new(algorithm: &PackedAlgorithm) -> PackedModel {
        match algorithm {
            PackedAlgorithm::Gcra(a) => PackedModel::Gcra(GcraModel::new(a)),
            PackedAlgorithm::TokenBucket(a) => PackedModel::Gcra(GcraModel::token_bucket(a)),
            PackedAlgorithm::LeakyBucket(a) => PackedModel::LeakyBucket(LeakyBucketModel::new(a)),
            PackedAlgorithm::FixedWindow(a) => PackedModel::FixedWindow(FixedWindowModel::new(a)),
            PackedAlgorithm::SlidingWindowCounter(a) => {
                PackedModel::SlidingWindowCounter(SlidingWindowCounterModel::new(a))
            }
        }
    }

    /// Checks `cost` at `now` (a `peek` when `commit` is false).
    pub fn check(
        &mut self,
        now: u64,
        cost: u32,
        commit: bool,
    ) -> Result<Decision, InsufficientCapacity> {
        match self {
            PackedModel::Gcra(m) => m.check(now, cost, commit),
            PackedModel::LeakyBucket(m) => m.check(now, cost, commit),
            PackedModel::FixedWindow(m) => m.check(now, cost, commit),
            PackedModel::SlidingWindowCounter(m) => m.check(now, cost, commit),
        }
    }
}
