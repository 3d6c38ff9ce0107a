//! [`Stopwatch`]: times a batch either by the calling thread's CPU time (the default: time
//! the thread spent running, so other processes on a busy machine are not billed to the
//! contender being measured) or by wall-clock time.

use crate::sync::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Whether stopwatches read wall-clock time instead of thread CPU time.
static WALL: AtomicBool = AtomicBool::new(false);

/// What a [`Stopwatch`] measures.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TimeSource {
    /// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`); wall time where that
    /// clock does not exist.
    ThreadCpu,
    /// `std::time::Instant`.
    Wall,
}

/// Starts at construction; [`Stopwatch::elapsed`] reads the time since.
///
/// ```
/// use tollgate_bench::{Stopwatch, TimeSource};
/// Stopwatch::set_source(TimeSource::ThreadCpu);
/// let watch = Stopwatch::start();
/// let mut x = 0u64;
/// for i in 0..100_000 { x = std::hint::black_box(x + i); }
/// assert!(watch.elapsed() > std::time::Duration::ZERO);
/// ```
#[derive(Copy, Clone, Debug)]
pub struct Stopwatch {
    wall: Instant,
    cpu: Option<Duration>,
}

impl Stopwatch {
    /// Chooses what every stopwatch started from now on measures (process-wide).
    pub fn set_source(source: TimeSource) {
        // Relaxed: a setting read by later stopwatches on the threads the caller starts
        // afterwards (thread spawn orders it); no data is published through it.
        WALL.store(source == TimeSource::Wall, Ordering::Relaxed);
    }

    /// The current source.
    pub fn source() -> TimeSource {
        // Relaxed: see `set_source`.
        if WALL.load(Ordering::Relaxed) {
            TimeSource::Wall
        } else {
            TimeSource::ThreadCpu
        }
    }

    /// A running stopwatch.
    #[inline]
    pub fn start() -> Stopwatch {
        let cpu = match Stopwatch::source() {
            TimeSource::ThreadCpu => thread_cpu_time(),
            TimeSource::Wall => None,
        };
        Stopwatch {
            wall: Instant::now(),
            cpu,
        }
    }

    /// Time since [`Stopwatch::start`], in the source chosen then.
    #[inline]
    pub fn elapsed(&self) -> Duration {
        match (self.cpu, thread_cpu_time()) {
            (Some(start), Some(now)) => now.saturating_sub(start),
            _ => self.wall.elapsed(),
        }
    }
}

/// The calling thread's CPU time, if the platform has the clock.
#[cfg(unix)]
fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and
    // CLOCK_THREAD_CPUTIME_ID is a clock id every supported unix accepts (an error return
    // is handled below, never read as a time).
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// No thread CPU clock: wall time is used.
#[cfg(not(unix))]
fn thread_cpu_time() -> Option<Duration> {
    None
}
