//! [`TimedCase`]: one timed comparison — up to three runners (tollgate, governor, floor)
//! doing the same work — and the interleaved measurement that turns it into a [`Row`].

use crate::{Contender, Row, Unit};
use std::time::Duration;

/// Runs the case's operation `iters` times (per thread, for threaded cases) and returns the
/// elapsed time of the timed part only. Setup (building tables, generating keys) happens
/// outside the returned duration.
pub type Runner = Box<dyn FnMut(u64) -> Duration + Send>;

/// How long and how often to measure.
///
/// ```
/// use tollgate_bench::Schedule;
/// let quick = Schedule::quick();
/// assert!(quick.rounds >= 3 && quick.rounds % 2 == 1);
/// ```
#[derive(Copy, Clone, Debug)]
pub struct Schedule {
    /// Rounds per case; each round runs every contender once, in a rotating order.
    pub rounds: usize,
    /// Target duration of one contender's batch in one round.
    pub batch: Duration,
}

impl Schedule {
    /// Short batches, few rounds: the whole `compare --quick` run stays under two minutes.
    pub fn quick() -> Schedule {
        Schedule {
            rounds: 9,
            batch: Duration::from_millis(5),
        }
    }

    /// The default schedule of `compare`.
    pub fn full() -> Schedule {
        Schedule {
            rounds: 21,
            batch: Duration::from_millis(20),
        }
    }
}

/// A named case with a runner per contender (`None` where a contender has no such case).
///
/// ```
/// use std::time::{Duration, Instant};
/// use tollgate_bench::{Schedule, TimedCase};
/// let spin = |iters: u64| {
///     let start = Instant::now();
///     for i in 0..iters { std::hint::black_box(i); }
///     start.elapsed()
/// };
/// let case = TimedCase::new("spin").tollgate(spin).floor(spin);
/// let schedule = Schedule { rounds: 3, batch: Duration::from_micros(200) };
/// let row = case.measure(schedule);
/// assert_eq!(row.name, "spin");
/// assert!(row.values[0].is_some() && row.values[1].is_none() && row.values[2].is_some());
/// ```
pub struct TimedCase {
    name: String,
    runners: [Option<Runner>; 3],
}

impl core::fmt::Debug for TimedCase {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TimedCase")
            .field("name", &self.name)
            .field(
                "contenders",
                &self.runners.iter().map(Option::is_some).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl TimedCase {
    /// A case with no runners yet.
    pub fn new(name: impl Into<String>) -> TimedCase {
        TimedCase {
            name: name.into(),
            runners: [None, None, None],
        }
    }

    /// The case's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets `contender`'s runner.
    pub fn with(
        mut self,
        contender: Contender,
        runner: impl FnMut(u64) -> Duration + Send + 'static,
    ) -> TimedCase {
        self.runners[contender.index()] = Some(Box::new(runner));
        self
    }

    /// Sets tollgate's runner.
    pub fn tollgate(self, runner: impl FnMut(u64) -> Duration + Send + 'static) -> TimedCase {
        self.with(Contender::Tollgate, runner)
    }

    /// Sets governor's runner.
    pub fn governor(self, runner: impl FnMut(u64) -> Duration + Send + 'static) -> TimedCase {
        self.with(Contender::Governor, runner)
    }

    /// Sets the floor's runner.
    pub fn floor(self, runner: impl FnMut(u64) -> Duration + Send + 'static) -> TimedCase {
        self.with(Contender::Floor, runner)
    }

    /// The runner of `contender`, if it has one (the criterion benches drive these).
    pub fn runner(&mut self, contender: Contender) -> Option<&mut Runner> {
        self.runners[contender.index()].as_mut()
    }

    /// Measures every contender: calibrates a batch size per contender (which also warms
    /// it up), then runs `schedule.rounds` rounds, each running every contender once in an
    /// order rotated by the round number, and takes the median ns/op per contender.
    pub fn measure(mut self, schedule: Schedule) -> Row {
        let mut iters = [0u64; 3];
        for (slot, runner) in self.runners.iter_mut().enumerate() {
            if let Some(runner) = runner {
                iters[slot] = calibrate(runner, schedule.batch);
            }
        }
        let mut samples: [Vec<f64>; 3] = Default::default();
        for round in 0..schedule.rounds {
            for step in 0..3 {
                let slot = (round + step) % 3;
                if let Some(runner) = &mut self.runners[slot] {
                    let elapsed = runner(iters[slot]);
                    samples[slot].push(elapsed.as_nanos() as f64 / iters[slot] as f64);
                }
            }
        }
        Row {
            name: self.name,
            unit: Unit::Ns,
            values: samples.map(median),
        }
    }
}

/// Doubles the batch until one takes a quarter of `batch`, then scales to `batch`.
fn calibrate(runner: &mut Runner, batch: Duration) -> u64 {
    let mut iters = 64u64;
    loop {
        let elapsed = runner(iters);
        if elapsed * 4 >= batch || iters >= 1 << 40 {
            let per_op = elapsed.as_nanos().max(1) as f64 / iters as f64;
            return ((batch.as_nanos() as f64 / per_op) as u64).max(1);
        }
        iters *= 2;
    }
}

/// The median of the samples (`None` when there are none).
fn median(mut samples: Vec<f64>) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    let mid = samples.len() / 2;
    Some(if samples.len() % 2 == 1 {
        samples[mid]
    } else {
        (samples[mid - 1] + samples[mid]) / 2.0
    })
}
